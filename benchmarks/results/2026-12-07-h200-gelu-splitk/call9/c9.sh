#!/usr/bin/env bash
# Device call 9 (issue 19), one command line on the same warm H100: call 5's BERT-base A/B again (it ran out of its
# 75 s deadline there): the landed split-K rule against `wide` (64-row tiles throughout) and `m128` (128-row tiles
# wherever they split), 1 x 128, 3 rounds alternated. ~1 minute. Carry: .whl-lite .gpu-lite.
. benchmarks/device_call.sh; build_worktree rule; variant wide kernels/cuda/triton_split_k.py $'            if 64 < num_tokens <= 128:\n' $'            if False:  # wide\n'; variant m128 kernels/cuda/triton_split_k.py '_programs(tall, num_tokens, n) >= _programs(wide, num_tokens, n)' 'True'; cd benchmarks; timeout 300 python3 latency_ab.py --out $OUT/ab-bert-base --system rule=/tmp/rule --system wide=/tmp/wide --system m128=/tmp/m128 --models bert-base --lengths 128 --attention triton --rounds 3 > /tmp/logs/latency-bert-base.log 2>&1; el "latency ab bert-base rc=$?"; tail -3 /tmp/logs/latency-bert-base.log | tee -a $OUT/steps.log; pack_logs
