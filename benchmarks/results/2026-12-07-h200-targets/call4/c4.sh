#!/usr/bin/env bash
# Device call 4 (issue 19): MiniLM's batch-1 target where the issue sets it: run.py's latency suite with the real
# all-MiniLM-L6-v2 weights (ours against transformers / sentence-transformers, fresh processes, GPU warmed, 3 rounds
# alternated; `embedpipe warmup` first). Carry: .gpu-assets .gpu-lite (the weights and the wheels together exceed the
# 64 MiB a call carries, so no faiss: the latency suite does not use it). Any card; the log names it. ~2 minutes.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
(cd benchmarks && timeout $(left 300) python3 run.py --suites latency --models minilm \
  --out $OUT/run --budget-s 280 > /tmp/logs/run.log 2>&1)
el "run.py latency minilm rc=$?"
tail -40 /tmp/logs/run.log >> $OUT/steps.log
pack_logs
