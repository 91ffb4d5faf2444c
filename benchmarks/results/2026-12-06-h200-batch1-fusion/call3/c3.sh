#!/usr/bin/env bash
# Device call 3 (issue 19): the split-K kernel table for every shape
# (call 2's stopped at the second: a bench bug), 64-512 tokens; the engine
# before (f962d95) against this tree ("after": split-K up to 256 tokens, projections of at most 768 outputs: BERT's and
# MiniLM's, not Qwen3's) and "after-all" (every shape, up to 512 tokens: call 2's), alternating fresh processes, 2 rounds; the GPU engine
# tests on "after-all"'s settings (split-K in Qwen3 too).
# Carry: .whl-lite .gpu-assets scratch.
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
ALL='s/^MAX_N: int | None = 768/MAX_N: int | None = None/; s/^TOKEN_RANGE: tuple\[int, int\] | None = (1, 256)/TOKEN_RANGE: tuple[int, int] | None = (1, 512)/'
cp -r /tmp/src-after /tmp/src-all && sed -i "$ALL" /tmp/src-all/kernels/cuda/triton_split_k.py kernels/cuda/triton_split_k.py
grep -n "^MAX_N\|^TOKEN_RANGE" /tmp/src-all/kernels/cuda/triton_split_k.py kernels/cuda/triton_split_k.py >> $OUT/steps.log; build all /tmp/src-all
cd benchmarks
timeout 90 python3 split_k_bench.py --out $OUT/split-k.json --tokens 64,128,256,512 > /tmp/logs/split-k.log 2>&1; el "split-k table rc=$?"
timeout $(left 300) python3 latency_ab.py --out $OUT --system before=/tmp/before --system after=/tmp/after --system after-all=/tmp/all --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 2 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -10 /tmp/logs/latency.log >> $OUT/steps.log
cd ..
timeout $(left 420) python3 -m pytest -q -rfE -m gpu -k "not fa2 and not fa3" -p no:cacheprovider \
  tests/kernels/test_gpu_engine.py > /tmp/logs/t-engine.log 2>&1
el "engine GPU tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
