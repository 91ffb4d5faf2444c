#!/usr/bin/env bash
# Device call 4 (issue 19): where the GELU epilogues part from torch's (gelu_errors.py), the fused-op tests, and every
# GPU test but FlashInfer's (not carried: the MiniLM weights take its room) on the code of call 3 with float32 GELU
# kept off cuBLASLt's tanh epilogue. Carry: .whl-lite .gpu-assets.
cd "$(dirname "$0")/../../../.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
mkdir -p /tmp/logs
. benchmarks/gpu_setup.sh > /tmp/logs/setup.log 2>&1; el "setup $(tail -2 /tmp/logs/setup.log | tr '\n' ' ')"
python3 benchmarks/results/2026-12-05-h200-fused-activation/call4/gelu_errors.py $OUT/gelu-errors.json > /tmp/logs/gelu-errors.log 2>&1; el "gelu errors rc=$?"
timeout 120 python3 -m pytest -q -rf tests/kernels/test_fused_ops.py -p no:cacheprovider > /tmp/logs/t-fused.log 2>&1; el "fused-op tests rc=$? $(tail -1 /tmp/logs/t-fused.log)"
grep -E "^FAILED|^E  +AssertionError" /tmp/logs/t-fused.log | head -12 | tee -a $OUT/steps.log
left() { echo $(( $1 - ($(date +%s) - T0) )); }
timeout $(left 330) python3 -m pytest -q -rfE -m gpu -k "not fa2 and not fa3" --durations=12 -p no:cacheprovider \
  tests/kernels/test_gpu_engine.py tests/kernels/test_triton_attention.py > /tmp/logs/t-engine.log 2>&1
el "engine + attention tests rc=$? $(tail -1 /tmp/logs/t-engine.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-engine.log | head -12 | tee -a $OUT/steps.log
timeout $(left 530) python3 -m pytest -q -rfE -m gpu -k "not fa2 and not fa3" --durations=12 -p no:cacheprovider \
  tests/kernels/test_gpu_rerankers.py tests/kernels/test_gpu_late_chunking.py tests/e2e/test_warmup.py \
  tests/pipeline/index/test_index_job.py tests/pipeline/scale/test_devices.py > /tmp/logs/t-rest.log 2>&1
el "rerankers, late chunking, warmup, index job, devices tests rc=$? $(tail -1 /tmp/logs/t-rest.log)"
grep -E "^(FAILED|ERROR)" /tmp/logs/t-rest.log | head -12 | tee -a $OUT/steps.log
tar -czf $OUT/logs.tar.gz -C /tmp logs
