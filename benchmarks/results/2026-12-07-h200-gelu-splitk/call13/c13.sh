#!/usr/bin/env bash
# Device call 13 (issue 19): each norm kernel asks L2 for the weight of the matmul after it (`prefetch`:
# call13/prefetch.patch, pdl.prefetch_share: the norm's programs, launched with PDL, each ask for a share of the
# weight's lines before their gdc_wait, so the asks overlap the kernel before). Aimed at the GEMMs cuBLAS runs, which
# cannot prefetch for themselves: Qwen3-0.6B's QKV (4,096 x 1,024, 5.8 us a layer at 1 x 128 on an H100, call 5) and
# BERT-base's FFN-in with cuBLASLt's GELU (6.1 us); the Triton matmuls after a norm (Qwen3's gate-up, BERT-base's
# QKV) get it too, on top of their own prefetch. The engine, `main` (this tree) against `prefetch`, Qwen3-0.6B and
# BERT-base each in processes of their own, 1 x 16 and 1 x 128, 3 rounds alternated; a replay timeline of both under
# `prefetch`; then the engine, fused-op and PDL tests under it (test_pdl: outputs bit for bit with PDL, so prefetch,
# on and off: the prefetch compiles only with PDL on, so no CPU test ran it). ~6.5 minutes; QUICK=1: no timeline
# and 5 minutes at most. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
patched prefetch benchmarks/results/2026-12-07-h200-gelu-splitk/call13/prefetch.patch || { pack_logs; exit 1; }
latency_step 150 qwen3-0.6b main prefetch
latency_step 250 bert-base main prefetch
if [ -z "$QUICK" ]; then
  cd benchmarks
  PYTHONPATH=/tmp/prefetch:$PYTHONPATH timeout $(left 300) python3 replay_timeline.py --out $OUT/timeline \
    --models qwen3-0.6b,bert-base --lengths 16,128 --attention triton > /tmp/logs/timeline.log 2>&1; el "timeline rc=$?"
  cd ..
fi
PYTHONPATH=/tmp/prefetch:$PYTHONPATH pytest_step prefetch $([ -z "$QUICK" ] && echo 390 || echo 290) \
  tests/kernels/test_gpu_engine.py tests/kernels/test_fused_ops.py tests/kernels/test_split_k.py \
  tests/kernels/test_pdl.py \
  -k "small_batches or split or partials or norm or pdl"
pack_logs
