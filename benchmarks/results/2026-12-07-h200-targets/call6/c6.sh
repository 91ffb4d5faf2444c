#!/usr/bin/env bash
# Device call 6 (issue 19): run.py's latency suite for the three batch-1 targets' models on one machine, with pack's
# host cut (1 x 128: ~20 -> ~9 us on the CPU here): MiniLM (real weights), BERT-base, Qwen3-0.6B; ours against
# transformers / sentence-transformers, fresh processes, GPU warmed, 3 rounds alternated, `embedpipe warmup` first.
# Then the GPU tests that need MiniLM's real weights (earlier calls carried its tokenizer alone, and its
# double-buffered cases failed there): test_gpu_engine -k minilm.
# Carry: .gpu-assets .gpu-lite (no wheels: neither needs faiss). Any card; the log names it. ~5 minutes.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
(cd benchmarks && timeout $(left 330) python3 run.py --suites latency --models minilm,bert-base,qwen3-0.6b \
  --out $OUT/run --budget-s 310 > /tmp/logs/run.log 2>&1)
el "run.py latency rc=$?"
tail -40 /tmp/logs/run.log >> $OUT/steps.log
pytest_step minilm 420 tests/kernels/test_gpu_engine.py -k minilm
pack_logs
