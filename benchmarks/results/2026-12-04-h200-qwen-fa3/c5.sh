#!/usr/bin/env bash
# Device call 5 (issue 19): FlashInfer fa2/fa3 on the Qwen3-0.6B shape: warmup's per-backend table, then batch 1 x
# 4096 and 64 x 512 (two in flight, MFU), triton vs auto (the measured choice), alternating fresh processes.
cd "$(dirname "$0")/.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
mkdir -p /tmp/site && tar -xJf .gpu-lite/minilm-nomodel.tar.xz -C /tmp/site  # the tokenizer the random folder copies
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-fi/*.whl; el "fi install rc=$?"
. benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1; el setup
python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" >> $OUT/steps.log 2>&1
cd benchmarks
timeout 80 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    model_folder('qwen3-0.6b', Path('/tmp/embedpipe-bench-models'))" > /tmp/folders.log 2>&1; el "folders rc=$?"
tail -3 /tmp/folders.log >> $OUT/steps.log
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
timeout 300 embedpipe warmup --model /tmp/embedpipe-bench-models/qwen3-0.6b > $OUT/warmup.log 2>&1; el "warmup qwen rc=$?"
timeout 220 python3 latency_ab.py --out $OUT --models qwen3-0.6b --lengths 4096 --attention triton,auto --rounds 2 --throughput 64x512 > $OUT/latency.log 2>&1; el "latency ab rc=$?"
