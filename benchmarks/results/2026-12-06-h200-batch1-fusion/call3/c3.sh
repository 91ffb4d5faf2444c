#!/usr/bin/env bash
# Device call 3 (issue 19), cut to the device time left: the split-K kernel table for every shape at 64-256 tokens
# (call 2's stopped at the second: a bench bug), then the engine before (f962d95) against this tree (split-K up to 256
# tokens for projections of at most 768 outputs: BERT's and MiniLM's; Qwen3's on cuBLAS), 2 rounds, alternating fresh
# processes. Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-before && tar -xf scratch/head.tar -C /tmp/src-before && build before /tmp/src-before
mkdir -p /tmp/src-after && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-after/ && build after /tmp/src-after
cd benchmarks
timeout 60 python3 split_k_bench.py --out $OUT/split-k.json --tokens 64,128,256 > /tmp/logs/split-k.log 2>&1; el "split-k table rc=$?"
timeout $(left 230) python3 latency_ab.py --out $OUT --system before=/tmp/before --system after=/tmp/after --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 2 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -7 /tmp/logs/latency.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
