#!/usr/bin/env bash
# Device call 15 (issue 19): Qwen3 with its RMSNorms deferred (deferred.patch: the kernels; deferred-tests.patch: their
# tests). Each projection before a norm (o_proj, down_proj: the split-K kernel) adds up its own partial sums in each
# tile's last program (arrival counters) with the bias and the residual, and leaves s and 1 / RMS(s); the matmul after
# takes s with the norm's weight folded into its weight and scales its rows (gate_up_proj in its epilogue; qkv_proj's
# q, k and v in the folded attention kernel). Two norm kernels a layer less (~2.9 us each at 1 x 128 on an H100,
# 56 of ~200 kernels), at the price of two atomics and an L2 round trip in the projections' last programs. Only at
# small batches (split-K's token range, folded attention: sequences up to 128 rows).
# First the new kernels' tests on the GPU (the atomics' ordering is what the interpreter cannot check), then
# `deferred` against `main` in the engine (Qwen3-0.6B, 1 x 16 and 1 x 128, 3 rounds alternated), then the engine
# tests under `deferred`: small batches against float32 transformers, and 1,000 double-buffered batches equal to one
# at a time to the bit (the last program's sum is in plane order whoever arrives last), and PDL's tests. ~7.5
# minutes.
# Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
HERE=benchmarks/results/2026-12-07-h200-gelu-splitk/call15
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
patched deferred $HERE/deferred.patch || { pack_logs; exit 1; }
apply_patch . $HERE/deferred-tests.patch; el "tests patched rc=$?"
PYTHONPATH=/tmp/deferred:$PYTHONPATH pytest_step kernels 120 --tb=long tests/kernels/test_deferred_norm.py \
  tests/kernels/test_split_k.py tests/kernels/test_fused_ops.py tests/kernels/test_triton_attention.py \
  -k "rms_scale or scales_rows or input_rstd or deferred"
latency_step 240 qwen3-0.6b main deferred
PYTHONPATH=/tmp/deferred:$PYTHONPATH pytest_step engine 400 --tb=long tests/kernels/test_gpu_engine.py \
  -k "small_batches or (double_buffered and qwen3 and triton)"
PYTHONPATH=/tmp/deferred:$PYTHONPATH pytest_step pdl 450 --tb=long tests/kernels/test_pdl.py
pack_logs
