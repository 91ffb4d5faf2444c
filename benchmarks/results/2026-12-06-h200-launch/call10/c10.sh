#!/usr/bin/env bash
# Device call 10 (issue 19): call 8's A/B again ("main": scratch/main.tar.gz, `git archive 0c8f394`, against "now"),
# 5 rounds alternating fresh processes, on the card this call gets. Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-main && tar -xzf scratch/main.tar.gz -C /tmp/src-main && build main /tmp/src-main
mkdir -p /tmp/src-now && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-now/ && build now /tmp/src-now
cd benchmarks
timeout $(left 180) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system now=/tmp/now --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 5 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
