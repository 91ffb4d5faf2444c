#!/usr/bin/env bash
# Device call 14 (issue 19), the next session's first: why the small-batch engine test failed on main (call 16 of
# the device, H100, 2026-12-07 evening: test_small_batches_eager_and_replayed_match_transformers_fp32[qwen3-0.6b]
# failed, no traceback came back; the 50 folded / launch-config attention tests passed first). `main` (this tree)
# against `verified` (this tree with d70be94's triton_attention.py, by call14/before-heads.patch: the kernel before
# LaunchConfig.heads, which passed the test in call 8), each with full tracebacks (logs.tar.gz): if only main
# fails, the heads refactor goes back out (kept as a patch for call 11); if both fail, the machine's packages
# (transformers) are looked at (pip list in $OUT). Then, on an H200, main alone at the batch-1 targets' shapes (BERT-base and
# Qwen3-0.6B, 1 x 16 and 1 x 128, 3 rounds): where the targets stand on this machine (the issue's is an H200; every
# call of 2026-12-07 ran on H100s). ~4.5 minutes. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
python3 -m pip list 2>/dev/null > $OUT/pip-list.txt
build_worktree main
systems=main
patched verified benchmarks/results/2026-12-07-h200-gelu-splitk/call14/before-heads.patch && systems="main verified"
for s in $systems; do  # tracebacks in /tmp/logs/t-NAME.log (packed)
  PYTHONPATH=/tmp/$s:$PYTHONPATH pytest_step $s 170 --tb=long tests/kernels/test_gpu_engine.py -k small_batches
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then  # the targets' machine
  latency_step 300 bert-base main
  latency_step 390 qwen3-0.6b main
fi
pack_logs
