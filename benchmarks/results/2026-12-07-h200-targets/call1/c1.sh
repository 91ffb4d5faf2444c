#!/usr/bin/env bash
# Device call 1 (issue 19): the batch-1 targets where the issue sets them, on an H200 with this tree: run.py's
# latency suite (ours against transformers / sentence-transformers, each in fresh processes, GPU warmed, 3 rounds
# alternated; `embedpipe warmup` first, so `auto` picks the attention per batch size) for BERT-base and Qwen3-0.6B
# (MiniLM's real weights and the wheels exceed the 64 MiB a call carries; its run.py figure waits for a call of its
# own): batch 1 at 128 / 512 / 4096 tokens and 5 / 25 / 50 x 512. On an H100 it stops at once (the targets' machine
# is the H200). ~3.5 minutes. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: skipped"; exit 3; }
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
(cd benchmarks && timeout $(left 420) python3 run.py --suites latency --models bert-base,qwen3-0.6b \
  --out $OUT/run --budget-s 400 > /tmp/logs/run.log 2>&1)
el "run.py latency rc=$?"
tail -40 /tmp/logs/run.log >> $OUT/steps.log
pack_logs
