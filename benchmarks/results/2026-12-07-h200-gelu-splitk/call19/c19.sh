#!/usr/bin/env bash
# Device call 19 (issue 19): call 17's 5-stage split-K pipelines, where they helped: Qwen3-0.6B at 1 x 16 (replayed
# 0.846 -> 0.826 ms) gained and 1 x 128 (128-row tiles) did not. `deep64`: 5 stages for 64-row tiles only (every
# projection up to 64 tokens, and those that keep 64 rows at 65-128), 4 for 128-row ones, against `main`; MiniLM-L6,
# BERT-base, Qwen3-0.6B each in processes of their own, 1 x 16 and 1 x 128, 3 rounds alternated; then the split-K
# tests under it (the pins of split_config compare whole configs: they fail by design). ~4 minutes. Carry: .whl-lite
# .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
variant deep64 kernels/cuda/triton_split_k.py \
  '    return SplitConfig(block_m, block_n, block_k, triton.cdiv(k_blocks, per_split))' \
  '    return SplitConfig(block_m, block_n, block_k, triton.cdiv(k_blocks, per_split),
                       num_stages=5 if block_m == 64 else 4)  # deep64' || { pack_logs; exit 1; }
latency_step 100 minilm-l6 main deep64
latency_step 180 bert-base main deep64
latency_step 260 qwen3-0.6b main deep64
PYTHONPATH=/tmp/deep64:$PYTHONPATH pytest_step deep64 300 tests/kernels/test_split_k.py
pack_logs
