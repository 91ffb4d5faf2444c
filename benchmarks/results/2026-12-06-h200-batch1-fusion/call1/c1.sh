#!/usr/bin/env bash
# Device call 1 (issues 19, 20): the fused-op tests' final version (GELU references in float64, written 2026-12-05,
# never run on a GPU), the batch-1 profile of this tree (per kernel, BERT-base and Qwen3-0.6B shapes), and the serve
# BERT-base 512-token passage at 16 clients, 500ee79 (before the tanh GELU) against this tree, alternating.
# Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
timeout 150 python3 -m pytest -q -rf tests/kernels/test_fused_ops.py -p no:cacheprovider > /tmp/logs/t-fused.log 2>&1; el "fused-op tests rc=$? $(tail -1 /tmp/logs/t-fused.log)"
grep -E "^FAILED|^E  +AssertionError" /tmp/logs/t-fused.log | head -12 | tee -a $OUT/steps.log
cd benchmarks
timeout $(left 330) python3 batch1_profile.py --out $OUT --models bert-base,qwen3-0.6b --attention triton > /tmp/logs/profile.log 2>&1; el "profile rc=$?"
mkdir -p /tmp/before-src && tar -xf ../scratch/before.tar -C /tmp/before-src
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/before /tmp/before-src > /tmp/logs/before.log 2>&1; el "before install rc=$?"
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
timeout 60 embedpipe warmup --model /tmp/embedpipe-bench-models/bert-base > /tmp/logs/warmup.log 2>&1; el "warmup rc=$?"
timeout $(left 540) python3 serve_online_ab.py --system before=/tmp/before --system after= --seconds 3 --out $OUT \
  --model /tmp/embedpipe-bench-models/bert-base --workloads "passage-512 base64" --clients 1,16 --rounds 2 > /tmp/logs/serve.log 2>&1
el "serve bert ab rc=$?"; tail -12 /tmp/logs/serve.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
