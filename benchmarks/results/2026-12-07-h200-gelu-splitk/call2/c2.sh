#!/usr/bin/env bash
# Device call 2 (issue 19): call 1 cut to fit a short lease (under 8 minutes of device time left after failed starts).
# BERT-base and Qwen3-0.6B at 1 x 128 only, main against gelu, sk128 and rawcopy (call1/variant.sh), fresh processes
# alternated, 3 rounds (latency-ab.json written after each); then the split-K and fused-op tests of gelu + sk128 on
# the GPU while time is left. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
C=benchmarks/results/2026-12-07-h200-gelu-splitk/call1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
for v in gelu sk128 rawcopy both; do
  worktree_copy $v && bash $C/variant.sh /tmp/src-$v $v && build $v /tmp/src-$v || el "variant $v failed"
done
cd benchmarks
timeout $(left 250) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system gelu=/tmp/gelu --system sk128=/tmp/sk128 --system rawcopy=/tmp/rawcopy --models bert-base,qwen3-0.6b --lengths 128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
cd ..
PYTHONPATH=/tmp/both:$PYTHONPATH pytest_step both 330 tests/kernels/test_split_k.py tests/kernels/test_fused_ops.py -k "split or partials or linear_act or epilogue"
pack_logs
