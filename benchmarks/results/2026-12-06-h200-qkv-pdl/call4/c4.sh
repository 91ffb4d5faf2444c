#!/usr/bin/env bash
# Device call 4 (issue 19): is warmup's fa3 timing at small batches repeatable? fa_timing.py in two fresh processes
# (three timings each), with call 1's FlashInfer JIT cache. Carry: .whl .gpu-lite .fi-cache.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
for p in 1 2; do
  timeout $(left 200) python3 benchmarks/results/2026-12-06-h200-qkv-pdl/call4/fa_timing.py > $OUT/fa-timing-$p.log 2>&1
  el "fa timing $p rc=$?"; grep -E "^run|plan" $OUT/fa-timing-$p.log >> $OUT/steps.log
done
