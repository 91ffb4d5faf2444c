#!/usr/bin/env bash
# Device call 18 (issue 19): where call 15's deferred norms lost 0.26 ms at Qwen3-0.6B 1 x 128 (replayed 0.932 ->
# 1.191, +9 us a layer where two norm kernels went): replay timelines (replay_timeline.py, kernel by kernel) of `main`
# and `deferred` (call15/deferred.patch), 1 x 16 and 1 x 128. ~2 minutes. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
patched deferred benchmarks/results/2026-12-07-h200-gelu-splitk/call15/deferred.patch
for s in main deferred; do
  (cd benchmarks && PYTHONPATH=/tmp/$s:$PYTHONPATH timeout $(left 200) python3 replay_timeline.py --out $OUT/timeline-$s \
    --models qwen3-0.6b --lengths 16,128 --attention triton > /tmp/logs/timeline-$s.log 2>&1)
  el "timeline $s rc=$?"
done
pack_logs
