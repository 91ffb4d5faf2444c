#!/usr/bin/env bash
# Device call 11 (issue 19): Qwen3-0.6B's folded attention with a group's two query heads stacked in one block
# (LaunchConfig.heads = 2: each key block loaded, normed and rotated once for both heads, not once per head). First
# attention_configs.py --fold times the landed configurations (16 x 64 / 16 x 128, 8 warps, one stage) against
# stacked ones (8- to 32-row blocks of two heads) at 1 x 16 and 1 x 128, alone in replayed graphs; where the fastest
# at 1 x 16 or at 1 x 128 beats the landed one by 3% or more, `stacked` (launch_config's folded branch returning the
# fastest of each) runs in the engine against `main` (this tree), Qwen3-0.6B alone in each process, 1 x 16 and
# 1 x 128, 3 rounds alternated; then the attention tests and the small-batch engine test under `stacked` (its
# launch-config pin fails by design). ~4 minutes at most.
# QUICK=1: no tests (the sweep checks every configuration against torch-varlen), ~3 minutes. Carry: .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
cd benchmarks
PYTHONPATH=/tmp/main:$PYTHONPATH timeout $(left 75) python3 attention_configs.py --out $OUT/stack --fold \
  --shapes qwen3-0.6b --batches 1x16,1x128 \
  --configs 16x64x8x1,16x128x8x1,16x64x8x1x2,16x128x8x1x2,16x128x4x1x2,8x64x4x1x2,8x128x4x1x2,8x128x8x1x2 \
  > /tmp/logs/stack.log 2>&1; el "stack sweep rc=$?"
grep -v Warning /tmp/logs/stack.log | tail -3 >> $OUT/steps.log
line=$(python3 - $OUT/stack/attention-configs.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["shapes"]["qwen3-0.6b"]
def pick(batch, landed):  # "8x128 w4 s1 h2" -> "8, 128, 4, 1, heads=2"
    timed = {n: t for n, t in rows[batch]["triton"].items() if isinstance(t, float)}
    if landed not in timed:
        return False, ""
    best = min((n for n in timed if " h" in n or n == landed), key=timed.get)  # stacked ones, or the landed
    if best == landed or timed[best] > 0.97 * timed[landed]:
        best = landed
    block, warps, stages, *heads = best.split()
    args = [*block.split("x"), warps[1:], stages[1:]] + [f"heads={h[1:]}" for h in heads]
    return best != landed, f"LaunchConfig({', '.join(args)})"
changed16, small = pick("1x16", "16x64 w8 s1")
changed128, large = pick("1x128", "16x128 w8 s1")
if changed16 or changed128:
    print(f"        return {small} if max_q <= 64 else {large}  # stacked")
PY
)
el "stacked variant: '$line'"
cd ..
if [ -n "$line" ] && variant stacked kernels/cuda/triton_attention.py \
    $'        return LaunchConfig(16, 64 if max_q <= 64 else 128, 8, 1)\n' "$line"$'\n'; then
  latency_step 170 qwen3-0.6b main stacked
fi
tree=/tmp/main; [ -d /tmp/stacked ] && tree=/tmp/stacked
[ -z "$QUICK" ] && PYTHONPATH=$tree:$PYTHONPATH pytest_step $(basename $tree) 235 tests/kernels/test_triton_attention.py \
  tests/kernels/test_gpu_engine.py -k "fold or launch_config or every_launch or small_batches"
pack_logs
