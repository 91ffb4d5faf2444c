#!/usr/bin/env bash
# Device call 1 (issue 19): BERT-base's batch-1 step. Variants (variant.sh) against main: `gelu` (BERT's FFN-in + GELU
# in triton_linear's kernel, launched with PDL, up to 256 tokens, instead of cuBLASLt's GELU epilogue, which has no
# PDL), `sk128` (split-K tiles 64 x 32 x 128), `both` (the two), `rawcopy` (host side: the replay's input copy and
# the download through the CUDA driver, copies.py). latency_ab.py first: fresh processes alternated, 3 rounds,
# BERT-base, MiniLM-L6 and Qwen3-0.6B at 1 x 16 and 1 x 128, step and replay. Then each variant's tests on this GPU:
# `both` (split-K, fused ops, the small-batch engine test against the float32 references), `rawcopy` (copies against
# torch's copy_, the small-batch, replay == eager and double-buffered engine tests on BERT-base). ~8 minutes.
# Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
C=benchmarks/results/2026-12-07-h200-gelu-splitk/call1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
for v in gelu sk128 both rawcopy; do
  worktree_copy $v && bash $C/variant.sh /tmp/src-$v $v && build $v /tmp/src-$v || el "variant $v failed"
done
cd benchmarks
timeout $(left 360) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system gelu=/tmp/gelu --system sk128=/tmp/sk128 --system both=/tmp/both --system rawcopy=/tmp/rawcopy --models bert-base,minilm-l6,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -30 /tmp/logs/latency.log >> $OUT/steps.log
cd ..
PYTHONPATH=/tmp/both:$PYTHONPATH pytest_step both 450 tests/kernels/test_split_k.py tests/kernels/test_fused_ops.py tests/kernels/test_gpu_engine.py -k "split or partials or linear_act or epilogue or small_batches"
cp $C/test_gpu_copies.py tests/kernels/  # rawcopy's own test, in this copy of the tree
PYTHONPATH=/tmp/rawcopy:$PYTHONPATH pytest_step rawcopy 540 tests/kernels/test_gpu_copies.py tests/kernels/test_gpu_engine.py -k "copies or small_batches or (double_buffered and bert) or (replay_equals and bert)"
pack_logs
