#!/usr/bin/env bash
# Device call 2 (issue 19): Qwen3's q/k norm + RoPE folded into the Triton attention kernel ("fold", this tree)
# against "head" (scratch/head.tar.gz: the tree of call 1), and three variants of the fold: the 128-row attention
# bound in one key block of 128 ("bn128"), in query blocks of 16 rows ("bm16"), and Qwen3's 1,024-output projections
# split along K ("splitk"); 3 rounds alternating fresh processes, the step and its replay alone; the fold's
# timeline; then the GPU tests the fold touches. Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
variant() {  # NAME FILE SED
  mkdir -p /tmp/src-$1 && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-$1/
  sed -i "$3" /tmp/src-$1/kernels/cuda/$2; diff -r kernels /tmp/src-$1/kernels | grep "^>" | tee -a $OUT/steps.log
  build $1 /tmp/src-$1
}
mkdir -p /tmp/src-head && tar -xzf scratch/head.tar.gz -C /tmp/src-head && build head /tmp/src-head
variant fold triton_attention.py 's/^x//'
variant bn128 triton_attention.py 's/    return LaunchConfig(64, 64, 4, 2 if max_q <= 128 else 3)/    return LaunchConfig(64, 128, 8, 2) if max_q <= 128 else LaunchConfig(64, 64, 4, 3)/'
variant bm16 triton_attention.py 's/    if max_q <= 64:/    if max_q <= 128:/'
variant splitk triton_split_k.py 's/^MAX_N: int | None = 768/MAX_N: int | None = None/'
cd benchmarks
timeout $(left 300) python3 latency_ab.py --out $OUT --system head=/tmp/head --system fold=/tmp/fold --system bn128=/tmp/bn128 --system bm16=/tmp/bm16 --system splitk=/tmp/splitk --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
PYTHONPATH=/tmp/fold:$PYTHONPATH timeout $(left 340) python3 replay_timeline.py --out $OUT/timeline-fold --models qwen3-0.6b --lengths 16,128 > /tmp/logs/timeline-fold.log 2>&1
el "timeline fold rc=$? $(grep '^## ' /tmp/logs/timeline-fold.log | tr '\n' ' ')"
cd ..
timeout $(left 400) python3 -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_triton_attention.py tests/kernels/test_pdl.py > /tmp/logs/t-attn.log 2>&1
el "attention + pdl tests rc=$? $(tail -1 /tmp/logs/t-attn.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-attn.log | head -12 | tee -a $OUT/steps.log
timeout $(left 550) python3 -m pytest -q -rfE -m gpu -k "qwen3 and triton" -p no:cacheprovider tests/kernels/test_gpu_engine.py > /tmp/logs/t-engine.log 2>&1
el "qwen3 triton engine tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
