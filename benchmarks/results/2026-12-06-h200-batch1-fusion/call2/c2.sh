#!/usr/bin/env bash
# Device call 2 (issue 19): the split-K projections before each add-and-norm (kernels/cuda/triton_split_k.py) on a GPU.
# Tests (fused ops, split-K), the kernel table (split_k_bench.py: cuBLAS + norm against the partial sums + norm, and a
# sweep of tiles and split counts at 64 and 128 tokens), the engine before (f962d95) vs after (this tree, TOKEN_RANGE
# (1, 512)) alternating fresh processes, then the GPU engine tests. Carry: .whl-lite .gpu-assets scratch.
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
timeout 120 python3 -m pytest -q -rf tests/kernels/test_split_k.py tests/kernels/test_fused_ops.py -p no:cacheprovider > /tmp/logs/t-fused.log 2>&1; el "split-k + fused-op tests rc=$? $(tail -1 /tmp/logs/t-fused.log)"
grep -E "^FAILED|^E  +AssertionError" /tmp/logs/t-fused.log | head -8 | tee -a $OUT/steps.log
cd benchmarks
timeout 90 python3 split_k_bench.py --out $OUT/split-k.json > /tmp/logs/split-k.log 2>&1; el "split-k table rc=$?"
timeout 100 python3 split_k_bench.py --out $OUT/split-k-sweep.json --tokens 64,128 --sweep > /tmp/logs/split-k-sweep.log 2>&1; el "split-k sweep rc=$?"
timeout $(left 400) python3 latency_ab.py --out $OUT --system before=/tmp/before --system after=/tmp/after --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -16 /tmp/logs/latency.log >> $OUT/steps.log
cd ..
timeout $(left 570) python3 -m pytest -q -rfE -m gpu -k "not fa2 and not fa3" --durations=8 -p no:cacheprovider \
  tests/kernels/test_gpu_engine.py tests/kernels/test_triton_attention.py > /tmp/logs/t-engine.log 2>&1
el "engine + attention tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
