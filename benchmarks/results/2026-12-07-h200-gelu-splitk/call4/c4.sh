#!/usr/bin/env bash
# Device call 4 (issue 19), prepared, not run: the landed split-K tiles (64 x 32 x 128 where they still split K)
# against main's earlier 64 x 64 x 64 (`tiles64`: split_config's wide branch switched off), each model in a process
# of its own (call 2 ran Qwen3 after BERT-base in one process, and a change to BERT-base's kernels alone moved
# Qwen3's replay 2%), MiniLM-L6 and 1 x 16 included; on an H200, the BERT-base 1 x 128 step the issue's target
# names. 3 rounds each, fresh processes alternated; then the split-K tests and the small-batch engine test.
# ~7 minutes. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
worktree_copy tiles64 && python3 - /tmp/src-tiles64/kernels/cuda/triton_split_k.py <<'PY' && build tiles64 /tmp/src-tiles64
import sys
path = sys.argv[1]
text = open(path).read()
assert text.count("    if k % 128 == 0:\n") == 1
open(path, "w").write(text.replace("    if k % 128 == 0:\n", "    if False:  # tiles64: always 64 x 64 x 64\n"))
PY
cd benchmarks
for m in bert-base minilm-l6 qwen3-0.6b; do
  timeout $(left $([ $m = qwen3-0.6b ] && echo 380 || echo 250)) python3 latency_ab.py --out $OUT/ab-$m \
    --system main=/tmp/main --system tiles64=/tmp/tiles64 --models $m --lengths 16,128 --attention triton \
    --rounds 3 > /tmp/logs/latency-$m.log 2>&1; el "latency ab $m rc=$?"
  tail -4 /tmp/logs/latency-$m.log >> $OUT/steps.log
done
cd ..
PYTHONPATH=/tmp/main:$PYTHONPATH pytest_step main 520 tests/kernels/test_split_k.py tests/kernels/test_gpu_engine.py -k "split or partials or small_batches"
pack_logs
