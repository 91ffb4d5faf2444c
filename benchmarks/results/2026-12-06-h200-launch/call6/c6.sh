#!/usr/bin/env bash
# Device call 6 (issue 19), on the H200 call 5 found: the GPU tests of the plain projections' kernel and of small
# batches; "main" (scratch/main.tar.gz: `git archive 0c8f394`) against "now" (the plain projections in
# triton_linear's kernel up to 256 tokens for weights of at most 2 M elements: BERT's and MiniLM's QKV), batch 1 x 16
# and 1 x 128 and the 64 x 512 throughput batch, 3 rounds alternating fresh processes; Qwen3-0.6B 1 x 4096 and
# 64 x 512 with the Triton and torch varlen attention. Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
build() {  # NAME SOURCE-DIR
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/$1 $2 > /tmp/logs/build-$1.log 2>&1; el "build $1 rc=$?"
}
mkdir -p /tmp/src-main && tar -xzf scratch/main.tar.gz -C /tmp/src-main && build main /tmp/src-main
mkdir -p /tmp/src-now && cp -r pyproject.toml README.md cli pipeline kernels configs /tmp/src-now/ && build now /tmp/src-now
timeout $(left 100) python3 -m pytest -q -rfE -p no:cacheprovider tests/kernels/test_fused_ops.py > /tmp/logs/t-fused.log 2>&1
el "fused-ops tests rc=$? $(tail -1 /tmp/logs/t-fused.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-fused.log | head -12 | tee -a $OUT/steps.log
timeout $(left 170) python3 -m pytest -q -rfE -m gpu -k "small_batches or minilm" -p no:cacheprovider tests/kernels/test_gpu_engine.py > /tmp/logs/t-engine.log 2>&1
el "engine tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
cd benchmarks
timeout $(left 430) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system now=/tmp/now --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --throughput 64x512 --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -16 /tmp/logs/latency.log >> $OUT/steps.log
timeout $(left 560) python3 latency_ab.py --out $OUT/qwen-long --system now=/tmp/now --models qwen3-0.6b --lengths 4096 --attention triton,torch-varlen --throughput 64x512 --rounds 2 > /tmp/logs/long.log 2>&1; el "qwen long rc=$?"
tail -10 /tmp/logs/long.log >> $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
