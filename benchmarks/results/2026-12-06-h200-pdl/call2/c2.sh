#!/usr/bin/env bash
# Device call 2 (issue 19): before (1da319d), pdl (6e1796b: PDL up to 256 rows, the Triton matmuls' weight tiles
# asked of L2 before they wait) and pdl-next (this tree: the add-and-norm kernels also ask L2 for the weight of the
# matmul after them, cuBLAS's QKV and FFN-in included), 3 rounds alternating fresh processes at 1 x 16, 1 x 128 and
# 64 x 512; then the PDL and GPU engine tests on this tree. Cut to ~5 minutes: the session's device time was almost
# spent. Carry: .whl-lite .gpu-assets scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-before && tar -xzf scratch/head.tar.gz -C /tmp/src-before && build before /tmp/src-before
mkdir -p /tmp/src-pdl && tar -xzf scratch/pdl.tar.gz -C /tmp/src-pdl && build pdl /tmp/src-pdl
mkdir -p /tmp/src-next && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-next/ && build pdl-next /tmp/src-next
cd benchmarks
timeout $(left 200) python3 latency_ab.py --out $OUT --system before=/tmp/before --system pdl=/tmp/pdl --system pdl-next=/tmp/pdl-next --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -13 /tmp/logs/latency.log | grep -v "^before\|^pdl" >> $OUT/steps.log
cd ..
timeout $(left 290) python3 -m pytest -q -rfE -m gpu -k "pdl or (triton and (graph_replay or double_buffered))" -p no:cacheprovider \
  tests/kernels/test_pdl.py tests/kernels/test_gpu_engine.py > /tmp/logs/t-engine.log 2>&1
el "pdl + engine tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
