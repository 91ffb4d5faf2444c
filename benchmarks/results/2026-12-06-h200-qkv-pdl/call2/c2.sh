#!/usr/bin/env bash
# Device call 2 (issue 19): FlashInfer on today's code, with call 1's JIT cache (.fi-cache/flashinfer.tgz: fa2 and
# fa3 for Qwen3-0.6B's head shape): the GPU tests of fa2 / fa3 on the Qwen3 shapes, warmup's table, then Qwen3-0.6B
# 1 x 128, 1 x 4096 and 64 x 512 (two in flight, MFU) with triton against auto (the measured choice: fa3 above 512
# tokens), alternating fresh processes. Carry: .whl .gpu-lite .fi-cache.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
du -sh ~/.cache/flashinfer | tee -a $OUT/steps.log
pytest_step fi 150 -m gpu -k "qwen3 and (fa2 or fa3)" tests/kernels/test_gpu_engine.py
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
cd benchmarks
timeout 60 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    model_folder('qwen3-0.6b', Path('/tmp/embedpipe-bench-models'))" > /tmp/logs/folders.log 2>&1; el "folders rc=$?"
timeout $(left 260) embedpipe warmup --model /tmp/embedpipe-bench-models/qwen3-0.6b > $OUT/warmup.log 2>&1; el "warmup qwen rc=$?"
grep -E "attention|_ms" $OUT/warmup.log | tail -12 >> $OUT/steps.log
timeout $(left 530) python3 latency_ab.py --out $OUT/ab --models qwen3-0.6b --lengths 128,4096 --attention triton,auto --rounds 2 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
pack_logs
