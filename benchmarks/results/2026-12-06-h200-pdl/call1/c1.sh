#!/usr/bin/env bash
# Device call 1 (issue 19): programmatic dependent launch (kernels/cuda/pdl.py) for the Triton kernels of a forward
# pass, with the matmuls' weight tiles asked of L2 before they wait. A smoke check of PDL in a captured graph, the PDL
# tests, then the engine A/B alternating fresh processes: before (1da319d), pdl (this tree), pdl-noprefetch (this
# tree, no L2 prefetch), pdl-all (this tree with every projection up to 256 tokens in the Triton kernels: QKV, BERT's
# GELU FFN, Qwen3's split-K o/down); then the GPU engine tests on this tree and on pdl-all.
# Carry: .whl-lite .gpu-assets scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
python3 -c "import triton; from triton.backends.nvidia.compiler import CUDAOptions as O; print('triton', triton.__version__, 'launch_pdl' in O.__dataclass_fields__)" 2>&1 | tee -a $OUT/steps.log
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
tree() { mkdir -p /tmp/src-$1 && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-$1/; }
mkdir -p /tmp/src-before && tar -xf scratch/head.tar -C /tmp/src-before && build before /tmp/src-before
tree pdl && build pdl /tmp/src-pdl
tree nopf && sed -i 's/^    if PDL:$/    if False:/' /tmp/src-nopf/kernels/cuda/triton_linear.py /tmp/src-nopf/kernels/cuda/triton_split_k.py \
  && grep -c "if False:" /tmp/src-nopf/kernels/cuda/triton_linear.py /tmp/src-nopf/kernels/cuda/triton_split_k.py | tee -a $OUT/steps.log && build pdl-noprefetch /tmp/src-nopf
tree all && sed -i 's/"activation": None, "silu_mul": (64, 1 << 30), "identity": None}/"activation": (1, 256), "silu_mul": (1, 1 << 30), "identity": (1, 256)}/' /tmp/src-all/kernels/cuda/triton_linear.py \
  && sed -i 's/^MAX_N: int | None = 768$/MAX_N: int | None = None/' /tmp/src-all/kernels/cuda/triton_split_k.py \
  && grep -E '^TOKEN_RANGES|^MAX_N' /tmp/src-all/kernels/cuda/triton_linear.py /tmp/src-all/kernels/cuda/triton_split_k.py | tee -a $OUT/steps.log && build pdl-all /tmp/src-all
timeout 150 python3 -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_pdl.py > /tmp/logs/t-pdl.log 2>&1; el "pdl tests rc=$? $(tail -1 /tmp/logs/t-pdl.log)"
grep -E "^(FAILED|ERROR)|^E  +(AssertionError|Mismatch|Greatest)" /tmp/logs/t-pdl.log | head -8 | tee -a $OUT/steps.log
cd benchmarks
timeout $(left 400) python3 latency_ab.py --out $OUT --system before=/tmp/before --system pdl=/tmp/pdl --system pdl-noprefetch=/tmp/pdl-noprefetch --system pdl-all=/tmp/pdl-all --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 --throughput 64x512 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -24 /tmp/logs/latency.log >> $OUT/steps.log
cd ..
timeout $(left 490) python3 -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_split_k.py tests/kernels/test_fused_ops.py > /tmp/logs/t-fused.log 2>&1; el "split-k + fused-op tests rc=$? $(tail -1 /tmp/logs/t-fused.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-fused.log | head -8 | tee -a $OUT/steps.log
timeout $(left 560) python3 -m pytest -q -rfE -m gpu -k "triton or minilm_bf16 or random_weight_shapes" -p no:cacheprovider \
  tests/kernels/test_gpu_engine.py tests/kernels/test_triton_attention.py > /tmp/logs/t-engine.log 2>&1
el "engine + attention tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
PYTHONPATH=/tmp/pdl-all:$PYTHONPATH timeout $(left 585) python3 -m pytest -q -rfE -m gpu -k "triton or random_weight_shapes" -p no:cacheprovider \
  tests/kernels/test_pdl.py tests/kernels/test_gpu_engine.py > /tmp/logs/t-all.log 2>&1
el "pdl-all: pdl + engine tests rc=$? $(tail -1 /tmp/logs/t-all.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-all.log | head -8 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
