#!/usr/bin/env bash
# Device call 4 (issue 20): before (2935408) vs after (this checkout: the engine thread reads the jobs pipe and spins
# 1 ms when idle), one host, alternating fresh servers: MiniLM and Qwen3-0.6B-shaped queries, BERT-base passages.
cd "$(dirname "$0")/.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-serve/*.whl
. benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1; el setup
mkdir -p /tmp/before-src && tar -xf scratch/before.tar -C /tmp/before-src
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/before /tmp/before-src > /tmp/before.log 2>&1; el "before install rc=$?"
MINILM=$(python3 -c "from embedpipe.kernels.models.model_folder import resolve_model_path; print(resolve_model_path('minilm'))")
cd benchmarks
timeout 80 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    for m in ('qwen3-0.6b', 'bert-base'): model_folder(m, Path('/tmp/embedpipe-bench-models'))" > /tmp/folders.log 2>&1; el "folders rc=$?"
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
for m in minilm /tmp/embedpipe-bench-models/qwen3-0.6b /tmp/embedpipe-bench-models/bert-base; do
  timeout 60 embedpipe warmup --model $m >> $OUT/warmup.log 2>&1; el "warmup $m rc=$?"
done
mkdir -p $OUT/minilm $OUT/qwen $OUT/bert
AB="python3 serve_online_ab.py --system before=/tmp/before --system after= --seconds 3"
timeout 190 $AB --out $OUT/minilm --model $MINILM --workloads "query base64" --clients 1,16 --rounds 3 > $OUT/minilm/serve.log 2>&1; el "minilm ab rc=$?"
timeout 140 $AB --out $OUT/qwen --model /tmp/embedpipe-bench-models/qwen3-0.6b --workloads "query base64" --clients 1,16 --rounds 2 > $OUT/qwen/serve.log 2>&1; el "qwen ab rc=$?"
timeout 110 $AB --out $OUT/bert --model /tmp/embedpipe-bench-models/bert-base --workloads "passage-512 base64" --clients 16 --rounds 2 > $OUT/bert/serve.log 2>&1; el "bert ab rc=$?"
