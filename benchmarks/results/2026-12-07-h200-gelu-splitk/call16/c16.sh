#!/usr/bin/env bash
# Device call 16 (issue 19): call 12's `sklaunch` again (the split-K projections' pipelines 4 stages deep, not 3)
# against `main`, on every model the split-K kernel runs (MiniLM-L6, BERT-base, Qwen3-0.6B: each in processes of
# its own, 1 x 16 and 1 x 128, 3 rounds alternated): a second run before it lands. ~4 minutes. Carry: .whl-lite
# .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
variant sklaunch kernels/cuda/triton_split_k.py $'    num_stages: int = 3\n' $'    num_stages: int = 4  # sklaunch\n' \
  || { pack_logs; exit 1; }
latency_step 110 minilm-l6 main sklaunch
latency_step 190 bert-base main sklaunch
latency_step 270 qwen3-0.6b main sklaunch
pack_logs
