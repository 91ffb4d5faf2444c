#!/usr/bin/env bash
# Device call 1 (issue 19): the Triton GEMM of kernels/cuda/triton_linear.py on a GPU for the first time.
# Systems, each a `pip install --target` build: "before" = 500ee79 (cuBLAS, then the activation kernel);
# "fused" = this tree with the activation epilogues at every token count (TOKEN_RANGES activation, silu_mul);
# "all" = also the plain projections (identity) in the kernel up to 512 tokens. Tiles: tile_config's first guesses.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
mkdir -p /tmp/site
. benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1; el "setup"
build() {  # NAME SOURCE-DIR [identity range]
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-before && tar -xf scratch/before.tar -C /tmp/src-before && build before /tmp/src-before
for name in fused all; do
  mkdir -p /tmp/src-$name && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-$name/
  identity=None; [ $name = all ] && identity="(1, 512)"
  sed -i "s/^TOKEN_RANGES: .*/TOKEN_RANGES: dict[str, tuple[int, int] | None] = {\"activation\": (1, 1 << 30), \"silu_mul\": (1, 1 << 30), \"identity\": $identity}/" /tmp/src-$name/kernels/cuda/triton_linear.py
  build $name /tmp/src-$name
done
for site in /tmp/before /tmp/fused /tmp/all; do PYTHONPATH=$site:$PYTHONPATH python3 -c "
import embedpipe.kernels.cuda.triton_linear as t; print(t.__file__, getattr(t, 'TOKEN_RANGES', None), getattr(t, 'FUSED_MIN_TOKENS', '-'))" >> $OUT/steps.log 2>&1; done
timeout 100 python3 -m pytest -q -x tests/kernels/test_fused_ops.py -p no:cacheprovider > $OUT/t-fused.log 2>&1; el "fused-op tests rc=$? $(tail -1 $OUT/t-fused.log)"
cd benchmarks
timeout 150 python3 linear_act_bench.py --sweep --out $OUT/linear-act.json > $OUT/linear-act.log 2>&1; el "sweep rc=$?"
timeout $(( 580 - ($(date +%s) - T0) )) python3 latency_ab.py --out $OUT --system before=/tmp/before --system fused=/tmp/fused --system all=/tmp/all --models bert-base,qwen3-0.6b --lengths 128 --attention triton --rounds 2 --throughput 64x512 > $OUT/latency.log 2>&1; el "latency ab rc=$?"
