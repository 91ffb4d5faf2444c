#!/usr/bin/env bash
# Device call 9 (issue 19): call 8's A/B again ("main": scratch/main.tar.gz, `git archive 0c8f394`, against "now"),
# 5 rounds alternating fresh processes, on the card this call gets. Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
build_archive main scratch/main.tar.gz
build_worktree now
cd benchmarks
timeout $(left 200) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system now=/tmp/now --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 5 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
pack_logs
