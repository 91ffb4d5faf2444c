#!/usr/bin/env bash
# Device call 1 (issue 19, batch-1 latency): where a replayed 1 x 16 / 1 x 128 step's device time goes kernel by
# kernel (replay_timeline.py) for this tree ("head") and "tri" (every projection up to 256 tokens in a Triton
# kernel with PDL: the plain QKV projections in triton_linear's kernel, every add-and-norm projection, Qwen3's
# 1,024-output ones included, split along K); then head / tri / "splitk" (only the latter) alternating fresh
# processes, 3 rounds. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
variant() {  # NAME SED-ON-SPLIT-K SED-ON-LINEAR
  mkdir -p /tmp/src-$1 && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-$1/
  sed -i "$2" /tmp/src-$1/kernels/cuda/triton_split_k.py; sed -i "$3" /tmp/src-$1/kernels/cuda/triton_linear.py
  grep -n "^MAX_N" /tmp/src-$1/kernels/cuda/triton_split_k.py | tee -a $OUT/steps.log
  grep -n '"identity": ' /tmp/src-$1/kernels/cuda/triton_linear.py | tee -a $OUT/steps.log
  build $1 /tmp/src-$1
}
variant head 's/^x//' 's/^x//'
variant tri 's/^MAX_N: int | None = 768/MAX_N: int | None = None/' 's/"identity": None}/"identity": (1, 256)}/'
variant splitk 's/^MAX_N: int | None = 768/MAX_N: int | None = None/' 's/^x//'
cd benchmarks
for s in head tri; do
  PYTHONPATH=/tmp/$s:$PYTHONPATH timeout $(left 200) python3 replay_timeline.py --out $OUT/timeline-$s --models bert-base,qwen3-0.6b --lengths 16,128 > /tmp/logs/timeline-$s.log 2>&1
  el "timeline $s rc=$? $(grep '^## ' /tmp/logs/timeline-$s.log | tr '\n' ' ')"
done
timeout $(left 480) python3 latency_ab.py --out $OUT --system head=/tmp/head --system tri=/tmp/tri --system splitk=/tmp/splitk --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
