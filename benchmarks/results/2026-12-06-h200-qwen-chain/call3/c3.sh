#!/usr/bin/env bash
# Device call 3 (issue 19): the code as it lands ("final": the fold, query blocks of 16 rows for folded 128-row
# bounds, split-K for every add-and-norm projection up to 256 tokens) against "head" (scratch/head.tar.gz, the
# tree of calls 1-2), and two variants of final: Qwen3's gate-up + SiLU kernel in 64 x 64 x 64 tiles, 4 stages,
# up to 256 tokens ("gu64"), and the plain projections (QKV) in triton_linear's kernel up to 256 tokens ("qkv");
# 3 rounds alternating fresh processes; the GPU tests of what changed; the host phases of a batch-1 step
# (batch1_profile.py --no-gemm). Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
build_archive head scratch/head.tar.gz
variant() {  # NAME SED-ON-TRITON-LINEAR
  worktree_copy $1
  sed -i "$2" /tmp/src-$1/kernels/cuda/triton_linear.py; diff -r kernels /tmp/src-$1/kernels | grep "^>" | tee -a $OUT/steps.log
  build $1 /tmp/src-$1
}
variant final 's/^x//'
variant gu64 's/        return TileConfig(64, 32, 128, 8, 4, 3)/        return TileConfig(64, 64, 64, 8, 4, 4)/'
variant qkv 's/"identity": None}/"identity": (1, 256)}/'
cd benchmarks
timeout $(left 240) python3 latency_ab.py --out $OUT --system head=/tmp/head --system final=/tmp/final --system gu64=/tmp/gu64 --system qkv=/tmp/qkv --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
cd ..
pytest_step kernels 360 tests/kernels/test_triton_attention.py tests/kernels/test_split_k.py tests/kernels/test_pdl.py
pytest_step engine 510 -m gpu -k "small_batches or (qwen3 and triton)" tests/kernels/test_gpu_engine.py
cd benchmarks
PYTHONPATH=/tmp/final:$PYTHONPATH timeout $(left 560) python3 batch1_profile.py --out $OUT/profile-final --models bert-base,qwen3-0.6b --attention triton --no-gemm > /tmp/logs/profile.log 2>&1
el "profile rc=$?"
grep -E "^(bert|qwen)" /tmp/logs/profile.log | cut -c1-600 >> $OUT/steps.log
pack_logs
