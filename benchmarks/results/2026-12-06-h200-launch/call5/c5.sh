#!/usr/bin/env bash
# Device call 5 (issue 19): why a replayed graph's launch costs the host 3 us (BERT-base 1 x 16) or 41-49 us
# (BERT-base 1 x 128, Qwen3-0.6B): benchmarks/graph_launch.py on main, with PDL or split-K switched off.
# Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
cd benchmarks
timeout $(left 300) python3 graph_launch.py --out $OUT/launch --models bert-base,qwen3-0.6b,minilm-l6 --lengths 16,128 --variants base,no-pdl,no-split-k,qkv > /tmp/logs/launch.log 2>&1; el "graph_launch rc=$?"
cut -c1-400 /tmp/logs/launch.log | tail -40 >> $OUT/steps.log
pack_logs
