#!/usr/bin/env bash
# Device call 1 (issues 19/20 diagnostics): batch-1 profile after the Triton kernel; per-hop stamps of the serve path.
cd "$(dirname "$0")/.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-serve/*.whl
. benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1; el setup; tail -2 /tmp/setup.log >> $OUT/steps.log
cd benchmarks
timeout 60 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    for m in ('minilm-l6', 'bert-base', 'qwen3-0.6b'): model_folder(m, Path('/tmp/embedpipe-bench-models'))" > /tmp/folders.log 2>&1; el "folders rc=$?"
timeout 150 python3 batch1_profile.py --out /tmp/b1 --attention triton > $OUT/batch1-profile.log 2>&1; el "batch1 rc=$?"
cp /tmp/b1/batch1-profile.json $OUT/ 2>/dev/null
cd ..
git apply scratch/stamps.patch && cp scratch/stamp.py pipeline/util/stamp_tmp.py; el "patch rc=$?"
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
timeout 60 embedpipe warmup --model minilm > /tmp/w1.log 2>&1; el "warmup minilm rc=$?"
timeout 60 embedpipe warmup --model /tmp/embedpipe-bench-models/qwen3-0.6b > /tmp/w2.log 2>&1; el "warmup qwen rc=$?"
tail -3 /tmp/w1.log /tmp/w2.log >> $OUT/steps.log
for spec in "minilm minilm 4" "minilm1 minilm 1" "qwen /tmp/embedpipe-bench-models/qwen3-0.6b 4"; do
  set -- $spec
  timeout 90 python3 scratch/hops_gpu.py $1 $2 $3 /tmp/hops-$1.txt > /tmp/hops-run-$1.log 2>&1; el "hops $1 rc=$?"
  cat /tmp/hops-$1.txt >> $OUT/hops.txt 2>/dev/null || tail -20 /tmp/hops-run-$1.log >> $OUT/steps.log
done
