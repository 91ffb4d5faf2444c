#!/usr/bin/env bash
# Device call 3 (issue 19): what makes run.py's batch-1 call ~200 us slower than latency_ab.py's step on the same
# build (call 2 against call 19 of 2026-12-07-h200-gelu-splitk). gap.py, one configuration a fresh process, Qwen3-0.6B
# then BERT-base at 1 x 128, twice each: alone; with an eager second engine in the process (run.py's ablation); with
# eight idle processes holding the model in transformers (as many as run.py's 3 rounds leave idle). ~4 minutes.
# Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
GAP=benchmarks/results/2026-12-07-h200-targets/call3/gap.py
for model in qwen3-0.6b bert-base; do
  for r in 1 2; do
    for conf in alone second idle; do
      case $conf in alone) flags="";; second) flags="--second-engine";; idle) flags="--idle-peers 8";; esac
      timeout $(left 280) python3 $GAP --model $model $flags --out $OUT/gap-$model-$conf-$r.json \
        > /tmp/logs/gap-$model-$conf-$r.log 2>&1
      el "$model $conf $r rc=$? $(tail -1 /tmp/logs/gap-$model-$conf-$r.log | cut -c1-300)"
    done
  done
done
pack_logs
