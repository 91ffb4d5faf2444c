#!/usr/bin/env bash
# Device call 3 (issue 19): call 2's A/B, which stopped on latency_ab.py's empty system list (fixed: none named
# runs this checkout): Qwen3-0.6B 1 x 128, 1 x 4096 and 64 x 512 (two in flight, MFU), triton against fa3 named
# (warmup's choice between them at 2,048 tokens moved between calls 1 and 2), 2 rounds alternating fresh processes,
# with call 1's FlashInfer JIT cache. Carry: .whl .gpu-lite .fi-cache.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
cd benchmarks
timeout $(left 400) python3 latency_ab.py --out $OUT/ab --models qwen3-0.6b --lengths 128,4096 --attention triton,fa3 --rounds 2 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -8 /tmp/logs/latency.log >> $OUT/steps.log
pack_logs
