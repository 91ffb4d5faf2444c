#!/usr/bin/env bash
# Device call 2 (issue 19): the sweep again with TMA tiles, then the engine with the tiles and token ranges it picks
# (pick.py, applied to this machine's copy of the checkout only) against 500ee79 ("before"), and against a build
# that runs BERT's erf GELU as cuBLASLt's tanh-GELU epilogue ("tanh", an approximation: measured, not adopted).
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
mkdir -p /tmp/site
. benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1; el "setup"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-before && tar -xf scratch/before.tar -C /tmp/src-before && build before /tmp/src-before
mkdir -p /tmp/src-tanh && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-tanh/
sed -i 's/^CUBLASLT_GELU = ("gelu_new"/CUBLASLT_GELU = ("gelu", "gelu_new"/' /tmp/src-tanh/kernels/cuda/triton_linear.py
build tanh /tmp/src-tanh
timeout 100 python3 -m pytest -q -rf tests/kernels/test_fused_ops.py -p no:cacheprovider > $OUT/t-fused.log 2>&1; el "fused-op tests rc=$? $(tail -1 $OUT/t-fused.log)"
cd benchmarks
timeout 200 python3 linear_act_bench.py --sweep --shapes bert-base,qwen3-0.6b,minilm,bert-base\ ffn2,qwen3-0.6b\ down --out $OUT/linear-act.json > $OUT/linear-act.log 2>&1; el "sweep rc=$?"
cd ..
python3 benchmarks/results/2026-12-05-h200-fused-activation/call2/pick.py $OUT/linear-act.json kernels/cuda/triton_linear.py > $OUT/pick.log 2>&1; el "pick rc=$?"
mkdir -p /tmp/src-after && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-after/ && build after /tmp/src-after
for site in /tmp/before /tmp/after /tmp/tanh; do PYTHONPATH=$site:$PYTHONPATH python3 -c "
import embedpipe.kernels.cuda.triton_linear as t; print(t.__file__, getattr(t, 'TOKEN_RANGES', None), getattr(t, 'CUBLASLT_GELU', None), t.tile_config(128, False), t.tile_config(32768, True))" >> $OUT/steps.log 2>&1; done
cd benchmarks
timeout 150 python3 latency_ab.py --out $OUT --system before=/tmp/before --system after=/tmp/after --system tanh=/tmp/tanh --models bert-base,qwen3-0.6b --lengths 128 --attention triton --rounds 3 --throughput 64x512 > $OUT/latency.log 2>&1; el "latency ab rc=$?"
cd ..
timeout $(( 520 - ($(date +%s) - T0) )) python3 -m pytest -q tests/kernels/test_gpu_engine.py -p no:cacheprovider -k "(test_graph_replay_equals_eager and triton and (bert or qwen)) or (test_double_buffered and bert-base-auto)" > $OUT/t-engine.log 2>&1; el "engine tests rc=$? $(tail -1 $OUT/t-engine.log)"
