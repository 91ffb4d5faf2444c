#!/usr/bin/env bash
# Device call 3 (issue 20): the engine thread's idle spin, on (default) vs off, alternating fresh servers; stamps of
# the current request path.
cd "$(dirname "$0")/.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-serve/*.whl
. benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1; el setup; tail -2 /tmp/setup.log >> $OUT/steps.log
MINILM=$(python3 -c "from embedpipe.kernels.models.model_folder import resolve_model_path; print(resolve_model_path('minilm'))")
cd benchmarks
timeout 60 python3 -c "
import torch; from pathlib import Path; from common import model_folder
with torch.device('cuda'):
    model_folder('qwen3-0.6b', Path('/tmp/embedpipe-bench-models'))" > /tmp/folders.log 2>&1; el "folders rc=$?"
export EMBEDPIPE_CACHE_DIR=/tmp/ep-auto
timeout 60 embedpipe warmup --model minilm > $OUT/warmup.log 2>&1; el "warmup minilm rc=$?"
timeout 60 embedpipe warmup --model /tmp/embedpipe-bench-models/qwen3-0.6b >> $OUT/warmup.log 2>&1; el "warmup qwen rc=$?"
mkdir -p $OUT/minilm $OUT/qwen
timeout 230 python3 serve_online_ab.py --out $OUT/minilm --model $MINILM --system nospin= --system spin= --system-args "nospin:--idle-spin-us 0" --workloads "query base64" --clients 1,16 --rounds 3 --seconds 3 > $OUT/minilm/serve.log 2>&1; el "minilm ab rc=$?"
timeout 150 python3 serve_online_ab.py --out $OUT/qwen --model /tmp/embedpipe-bench-models/qwen3-0.6b --system nospin= --system spin= --system-args "nospin:--idle-spin-us 0" --workloads "query base64" --clients 1,16 --rounds 2 --seconds 3 > $OUT/qwen/serve.log 2>&1; el "qwen ab rc=$?"
cd ..
git apply scratch/stamps3.patch && cp scratch/stamp.py pipeline/util/stamp_tmp.py; el "patch rc=$?"
timeout 60 python3 scratch/hops_gpu.py minilm-spin minilm 4 /tmp/h1.txt > /tmp/h1.log 2>&1; el "hops spin rc=$?"
timeout 60 python3 scratch/hops_gpu.py minilm-nospin minilm 4 /tmp/h2.txt --idle-spin-us 0 > /tmp/h2.log 2>&1; el "hops nospin rc=$?"
cat /tmp/h1.txt /tmp/h2.txt > $OUT/hops.txt 2>/dev/null || tail -20 /tmp/h1.log /tmp/h2.log >> $OUT/steps.log
