#!/usr/bin/env bash
# Device call 7 (issue 19), the H200 of calls 5-6: where the ~70-100 us between a batch-1 step (0.396 ms, BERT-base
# 1 x 128) and its graph replayed back to back (0.315) go: batch1_profile.py's host phases, with a lone replay timed
# from the call to synchronize()'s return. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
cd benchmarks
timeout 200 python3 batch1_profile.py --out $OUT/profile --models minilm-l6,bert-base,qwen3-0.6b --attention triton --no-gemm > /tmp/logs/profile.log 2>&1
el "profile rc=$?"
grep -E "^(minilm|bert|qwen)" /tmp/logs/profile.log | cut -c1-900 >> $OUT/steps.log
pack_logs
