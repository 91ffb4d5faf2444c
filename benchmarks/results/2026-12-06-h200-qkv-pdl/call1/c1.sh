#!/usr/bin/env bash
# Device call 1 (issue 19): Qwen3-0.6B's QKV projection, the one kernel of its layers launched without PDL (cuBLAS),
# in triton_linear's kernel with PDL at 1 x 16 and 1 x 128, four tiles (qkv_tile.py) against main; each tile checked
# against float32 first (qkv_check.py). BERT-base rides along unchanged (its step on this card, five builds of the
# same BERT code). Then FlashInfer: warmup's per-backend table for Qwen3 (its JIT compile) and the JIT cache brought
# back for later calls. Carry: .whl .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
C=benchmarks/results/2026-12-06-h200-qkv-pdl/call1
timeout 90 python3 $C/qkv_check.py > $OUT/qkv-check.log 2>&1; el "qkv check rc=$?"; cat $OUT/qkv-check.log >> $OUT/steps.log
build_worktree main
for t in "q64 64 64 64 4 4" "q128m 128 64 64 4 4" "q128n 64 128 64 4 4" "q128 128 128 64 8 3"; do
  set -- $t; worktree_copy $1 && python3 $C/qkv_tile.py /tmp/src-$1 $2 $3 $4 $5 $6 && build $1 /tmp/src-$1
done
cd benchmarks
timeout $(left 330) python3 latency_ab.py --out $OUT/ab --system main=/tmp/main --system q64=/tmp/q64 --system q128m=/tmp/q128m --system q128n=/tmp/q128n --system q128=/tmp/q128 --models bert-base,qwen3-0.6b --lengths 16,128 --attention triton --rounds 3 > /tmp/logs/latency.log 2>&1; el "latency ab rc=$?"
tail -8 /tmp/logs/latency.log >> $OUT/steps.log
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
timeout $(left 520) embedpipe warmup --model /tmp/embedpipe-bench-models/qwen3-0.6b > $OUT/warmup.log 2>&1; el "warmup qwen rc=$?"
tail -15 $OUT/warmup.log >> $OUT/steps.log
du -sh ~/.cache/flashinfer >> $OUT/steps.log 2>&1
[ -d ~/.cache/flashinfer ] && tar -czf /tmp/fi.tgz -C ~/.cache flashinfer && split -b 15M -d /tmp/fi.tgz $OUT/flashinfer.tgz. && ls -la $OUT/flashinfer.tgz.* >> $OUT/steps.log
cd .. && pack_logs
