#!/usr/bin/env bash
# Device call 3 (issues 19, 20): the split-K kernel table for every shape (call 2's stopped at the second: a bench bug)
# and the sweep of tiles and splits at 64 and 128 tokens; then serve, BERT-base 512-token passages at 1 and 16
# clients, 500ee79 (before the tanh GELU) against this tree, alternating fresh servers.
# Carry: .whl-lite .whl-serve .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-serve/*.whl
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
cd benchmarks
timeout 100 python3 split_k_bench.py --out $OUT/split-k.json --tokens 64,128,256,512,1024 > /tmp/logs/split-k.log 2>&1; el "split-k table rc=$?"
timeout 150 python3 split_k_bench.py --out $OUT/split-k-sweep.json --tokens 64,128 --sweep > /tmp/logs/split-k-sweep.log 2>&1; el "split-k sweep rc=$?"
mkdir -p /tmp/before-src && tar -xf ../scratch/before.tar -C /tmp/before-src
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/before /tmp/before-src > /tmp/logs/before.log 2>&1; el "before install rc=$?"
timeout 60 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    model_folder('bert-base', Path('/tmp/embedpipe-bench-models'))" > /tmp/logs/folders.log 2>&1; el "folder rc=$?"
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
timeout 60 embedpipe warmup --model /tmp/embedpipe-bench-models/bert-base > /tmp/logs/warmup.log 2>&1; el "warmup rc=$?"
timeout $(left 560) python3 serve_online_ab.py --system before=/tmp/before --system after= --seconds 3 --out $OUT \
  --model /tmp/embedpipe-bench-models/bert-base --workloads "passage-512 base64" --clients 1,16 --rounds 2 > /tmp/logs/serve.log 2>&1
el "serve bert ab rc=$?"; tail -8 /tmp/logs/serve.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
