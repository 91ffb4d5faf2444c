#!/usr/bin/env bash
# Device call 5 (issue 19): the fused-op tests with the GELU tests rewritten from call 4's measurements, then the code
# as it lands ("after": Qwen3's gate-up + SiLU-and-mul in the TMA kernel from 64 tokens on, every half-precision
# GELU in cuBLASLt's epilogue) against 500ee79 ("before"), fresh processes alternated, 4 rounds, the GPU warmed in
# each. Carry: .whl-lite .gpu-assets scratch (scratch/before.tar: git archive 500ee79).
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-before && tar -xf scratch/before.tar -C /tmp/src-before && build before /tmp/src-before
mkdir -p /tmp/src-after && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-after/ && build after /tmp/src-after
timeout 100 python3 -m pytest -q -rf tests/kernels/test_fused_ops.py -p no:cacheprovider > /tmp/logs/t-fused.log 2>&1; el "fused-op tests rc=$? $(tail -1 /tmp/logs/t-fused.log)"
grep -E "^FAILED|^E  +AssertionError" /tmp/logs/t-fused.log | head -8 | tee -a $OUT/steps.log
cd benchmarks
timeout $(( 300 - ($(date +%s) - T0) )) python3 latency_ab.py --out $OUT --system before=/tmp/before --system after=/tmp/after --models minilm-l6,bert-base,qwen3-0.6b --lengths 128 --attention triton --rounds 4 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
cd ..
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
