#!/usr/bin/env bash
# Device call 6 (issue 19), on the H200 call 5 found: the GPU tests of the plain projections' kernel and of small
# batches; "main" (scratch/main.tar.gz: `git archive 0c8f394`) against "now" (the plain projections in
# triton_linear's kernel up to 256 tokens for weights of at most 2 M elements: BERT's and MiniLM's QKV), batch 1 x 16
# and 1 x 128 and the 64 x 512 throughput batch, 3 rounds alternating fresh processes; Qwen3-0.6B 1 x 4096 and
# 64 x 512 with the Triton and torch varlen attention. Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
build_archive main scratch/main.tar.gz
build_worktree now
pytest_step fused 100 tests/kernels/test_fused_ops.py
pytest_step engine 170 -m gpu -k "small_batches or minilm" tests/kernels/test_gpu_engine.py
cd benchmarks
timeout $(left 430) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system now=/tmp/now --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --throughput 64x512 --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -16 /tmp/logs/latency.log >> $OUT/steps.log
timeout $(left 560) python3 latency_ab.py --out $OUT/qwen-long --system now=/tmp/now --models qwen3-0.6b --lengths 4096 --attention triton,torch-varlen --throughput 64x512 --rounds 2 > /tmp/logs/long.log 2>&1; el "qwen long rc=$?"
tail -10 /tmp/logs/long.log >> $OUT/steps.log
pack_logs
