#!/usr/bin/env bash
# Device call 9 (issue 19): whether the 60 us spread of a batch-1 step between fresh processes follows the CPU core
# (host_placement.py: BERT-base 1 x 128, pinned to cores 0/4/8/12 and unpinned, 2 rounds), and the host phases of
# a step measured before any profile (batch1_profile.py, its two passes). Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
cd benchmarks
timeout $(left 200) python3 host_placement.py --out $OUT/placement --model bert-base --length 128 --cpus 0,4,8,12 --rounds 2 > /tmp/logs/placement.log 2>&1
el "placement rc=$?"; tail -5 /tmp/logs/placement.log >> $OUT/steps.log
timeout $(left 330) python3 batch1_profile.py --out $OUT/profile --models minilm-l6,bert-base,qwen3-0.6b --attention triton --no-gemm > /tmp/logs/profile.log 2>&1
el "profile rc=$?"
tar -czf $OUT/logs.tar.gz -C /tmp logs
