#!/usr/bin/env bash
# Device call 8 (issue 19): the runner's host work per step cut (staging views and numpy arrays made once, a batch's
# key, arrays and longest sequence from its packer, the graph's cu_seqlens view kept with it) and BERT's / MiniLM's
# QKV in triton_linear's kernel: the GPU tests of what changed (engine but the real-weight MiniLM ones, rerankers,
# late chunking), then "main" (scratch/main.tar.gz: `git archive 0c8f394`) against "now", 3 rounds alternating fresh
# processes; whether the spread of a step between fresh processes follows the CPU core or torch's threads
# (host_placement.py, BERT-base 1 x 128, one round); the host phases of a step measured before any profile
# (batch1_profile.py's two passes). Carry: .whl-lite .gpu-lite scratch.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
build_archive main scratch/main.tar.gz
build_worktree now
pytest_step engine 200 -m gpu -k "not minilm" tests/kernels/test_gpu_engine.py tests/kernels/test_gpu_rerankers.py tests/kernels/test_gpu_late_chunking.py
cd benchmarks
timeout $(left 360) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system now=/tmp/now --models minilm-l6,bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -12 /tmp/logs/latency.log >> $OUT/steps.log
timeout $(left 410) python3 host_placement.py --out $OUT/placement --model bert-base --length 128 --cpus 0,8 --rounds 1 > /tmp/logs/placement.log 2>&1
el "placement rc=$?"; tail -4 /tmp/logs/placement.log >> $OUT/steps.log
PYTHONPATH=/tmp/now:$PYTHONPATH timeout $(left 450) python3 batch1_profile.py --out $OUT/profile --models minilm-l6,bert-base,qwen3-0.6b --attention triton --no-gemm > /tmp/logs/profile.log 2>&1
el "profile rc=$?"
pack_logs
