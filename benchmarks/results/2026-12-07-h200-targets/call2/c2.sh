#!/usr/bin/env bash
# Device call 2 (issue 19): this tree (b336c15: 64-row split-K tiles 5 stages deep) on any machine: the engine's GPU
# tests that compare it with float32 transformers at small batches (BERT-base, Qwen3-0.6B, pplx-embed-0.6B: eager,
# captured, replayed), the 1,000 double-buffered batches, and test_split_k; then run.py's latency suite for
# BERT-base and Qwen3-0.6B (as call 1; on an H200 these are the batch-1 targets' figures, on an H100 the suite's view
# of the same shapes). ~4 minutes (Qwen3-0.6B first: its target is not met; BERT-base where the budget reaches).
# Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
pytest_step engine 100 tests/kernels/test_gpu_engine.py -k "small_batches or double_buffered" \
  tests/kernels/test_split_k.py
(cd benchmarks && timeout $(left 230) python3 run.py --suites latency --models qwen3-0.6b,bert-base \
  --out $OUT/run --budget-s $(left 222) > /tmp/logs/run.log 2>&1)
el "run.py latency rc=$?"
grep -E "^\|" $OUT/run/results.md 2>/dev/null | head -40 >> $OUT/steps.log
pack_logs
