#!/usr/bin/env bash
# Call 13, its least form (the fifth session of 2026-12-07, ~340 s of device time left after nine failed starts):
# first the GPU tests of the attention kernel on main (LaunchConfig.heads refactor, not run on a GPU since call 8)
# and the small-batch engine test, then `main` against `prefetch` on Qwen3-0.6B (latency_step: 3 rounds, as far as
# the device time lasts; rounds are written as they finish). ~4 minutes. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
PYTHONPATH=/tmp/main:$PYTHONPATH pytest_step main 100 tests/kernels/test_triton_attention.py \
  tests/kernels/test_gpu_engine.py -k "fold or launch_config or every_launch or small_batches"
pack_logs
patched prefetch benchmarks/results/2026-12-07-h200-gelu-splitk/call13/prefetch.patch || { pack_logs; exit 1; }
latency_step 240 qwen3-0.6b main prefetch
pack_logs
