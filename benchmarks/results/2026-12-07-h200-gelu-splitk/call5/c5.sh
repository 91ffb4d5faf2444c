#!/usr/bin/env bash
# Device call 5 (issue 19): the rule split_config took from call 4 (128-row tiles at 65-128 tokens where their split
# makes up the halved tile count: Qwen3's o and down, BERT-base's FFN output) on BERT-base, the one model where it
# differs from both systems call 4 timed: `rule` (this tree), `wide` (64-row tiles throughout: call 4's main),
# `m128` (128-row tiles wherever they split, BERT-base's attention output too: call 4's m128). 1 x 128, 3 rounds,
# fresh processes alternated; then where a replayed 1 x 16 / 1 x 128 step's device time goes under `rule`
# (replay_timeline.py: Qwen3-0.6B, BERT-base), and the split-K tests and the small-batch engine test. ~2.5 minutes.
# Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree rule
variant wide kernels/cuda/triton_split_k.py $'            if 64 < num_tokens <= 128:\n' $'            if False:  # wide\n'
variant m128 kernels/cuda/triton_split_k.py '_programs(tall, num_tokens, n) >= _programs(wide, num_tokens, n)' 'True'
cd benchmarks
timeout $(left 75) python3 latency_ab.py --out $OUT/ab-bert-base --system rule=/tmp/rule --system wide=/tmp/wide \
  --system m128=/tmp/m128 --models bert-base --lengths 128 --attention triton --rounds 3 \
  > /tmp/logs/latency-bert-base.log 2>&1; el "latency ab bert-base rc=$?"
tail -2 /tmp/logs/latency-bert-base.log >> $OUT/steps.log
PYTHONPATH=/tmp/rule:$PYTHONPATH timeout $(left 115) python3 replay_timeline.py --out $OUT/timeline \
  --models qwen3-0.6b,bert-base --lengths 16,128 --attention triton > /tmp/logs/timeline.log 2>&1; el "timeline rc=$?"
cd ..
PYTHONPATH=/tmp/rule:$PYTHONPATH pytest_step rule 170 tests/kernels/test_split_k.py tests/kernels/test_gpu_engine.py -k "split or partials or small_batches"
pack_logs
