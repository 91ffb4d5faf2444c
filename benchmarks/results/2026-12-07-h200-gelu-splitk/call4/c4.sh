#!/usr/bin/env bash
# Device call 4 (issue 19): the landed split-K tiles (64 x 32 x 128 where they still split K) against main's earlier
# 64 x 64 x 64 (`tiles64`: split_config's wide branch switched off), each model in a process of its own (call 2 ran
# Qwen3 after BERT-base in one process, and a change to BERT-base's kernels alone moved Qwen3's replay 2%), MiniLM-L6
# and 1 x 16 included; on an H200, the BERT-base 1 x 128 step the issue's target names. Two variants for 65-128
# tokens, where a 64-row tile makes every weight tile be read twice: `gu128` (Qwen3's gate-up + SiLU in 128 x 32 x 128
# tiles: 96 programs, one wave, against 192), `m128` (the split-K partials in 128 x 32 x 128 tiles, twice the
# splits). 3 rounds each, fresh processes alternated; then the split-K tests and the small-batch engine test (main).
# ~6 minutes. Carry: .whl-lite .gpu-lite. QUICK=1 (for a lease with ~10 minutes left): no tiles64, no MiniLM-L6,
# ~5 minutes.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
build_worktree main
[ -z "$QUICK" ] && variant tiles64 kernels/cuda/triton_split_k.py $'    if k % 128 == 0:\n' $'    if False:  # tiles64\n'
variant gu128 kernels/cuda/triton_linear.py $'    if num_tokens <= 256:\n' \
  $'    if gated and 64 < num_tokens <= 128:  # gu128\n        return TileConfig(128, 32, 128, 8, 4, 3)\n    if num_tokens <= 256:\n'
variant m128 kernels/cuda/triton_split_k.py 'wide = _tiled_split(num_tokens, n, k, num_sms, 64, 32, 128)' \
  'wide = _tiled_split(num_tokens, n, k, num_sms, 128 if 64 < num_tokens <= 128 else 64, 32, 128)  # m128'
cd benchmarks
deadline=(170 260 440); models=(bert-base minilm-l6 qwen3-0.6b); systems="main gu128 m128 tiles64"; tests_end=540
[ -n "$QUICK" ] && { deadline=(140 330); models=(bert-base qwen3-0.6b); systems="main gu128 m128"; tests_end=400; }
for i in ${!models[@]}; do
  m=${models[$i]}
  timeout $(left ${deadline[$i]}) python3 latency_ab.py --out $OUT/ab-$m $(for s in $systems; do echo --system $s=/tmp/$s; done) \
    --models $m --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency-$m.log 2>&1; el "latency ab $m rc=$?"
  tail -4 /tmp/logs/latency-$m.log >> $OUT/steps.log
done
cd ..
PYTHONPATH=/tmp/main:$PYTHONPATH pytest_step main $tests_end tests/kernels/test_split_k.py tests/kernels/test_gpu_engine.py -k "split or partials or small_batches"
pack_logs
