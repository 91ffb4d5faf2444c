#!/usr/bin/env bash
# Device call 5 (issue 19): warmup's backends timed in 3 rounds, in turns, each size's median kept
# (attention_timing.time_backends): its GPU test on the Qwen3-0.6B shape (every backend, the choice auto runs, an
# index job recording it), then `embedpipe warmup` on the benchmark's Qwen3-0.6B folder in two fresh processes: the
# choice and its time. With call 1's FlashInfer JIT cache. Carry: .whl .gpu-lite .fi-cache.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
pytest_step warmup 200 -m gpu -k "measures and qwen3" tests/e2e/test_warmup.py
cd benchmarks
timeout 60 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    model_folder('qwen3-0.6b', Path('/tmp/embedpipe-bench-models'))" > /tmp/logs/folders.log 2>&1; el "folders rc=$?"
for p in 1 2; do
  EMBEDPIPE_CACHE_DIR=/tmp/ep-auto-$p timeout $(left 330) embedpipe warmup --model /tmp/embedpipe-bench-models/qwen3-0.6b > $OUT/warmup-$p.log 2>&1
  el "warmup $p rc=$?"; grep -E "attention" $OUT/warmup-$p.log >> $OUT/steps.log
done
cd .. && pack_logs
