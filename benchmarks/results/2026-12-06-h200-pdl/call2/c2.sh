#!/usr/bin/env bash
# Device call 2 (issue 19): the code as it lands (PDL up to 256 rows, the matmuls' weight tiles asked of L2 before
# they wait) against 1da319d, 3 rounds alternating fresh processes at 1 x 16, 1 x 128 and 64 x 512 (where the landed
# code launches without PDL); then the PDL and GPU engine tests on this tree. Cut to ~5 minutes: the session's device
# time was almost spent. Carry: .whl-lite .gpu-assets scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-before && tar -xf scratch/head.tar -C /tmp/src-before && build before /tmp/src-before
mkdir -p /tmp/src-pdl && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-pdl/ && build pdl /tmp/src-pdl
timeout 90 python3 -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_pdl.py > /tmp/logs/t-pdl.log 2>&1; el "pdl tests rc=$? $(tail -1 /tmp/logs/t-pdl.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-pdl.log | head -8 | tee -a $OUT/steps.log
cd benchmarks
timeout $(left 230) python3 latency_ab.py --out $OUT --system before=/tmp/before --system pdl=/tmp/pdl --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log | grep -v "^before\|^pdl" >> $OUT/steps.log
cd ..
timeout $(left 290) python3 -m pytest -q -rfE -m gpu -k "triton and (graph_replay or double_buffered)" -p no:cacheprovider \
  tests/kernels/test_gpu_engine.py > /tmp/logs/t-engine.log 2>&1
el "engine tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
