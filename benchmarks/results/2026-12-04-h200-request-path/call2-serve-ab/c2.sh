#!/usr/bin/env bash
# Device call 2 (issue 20): the serve request path before (2935408) and after (the engine thread reads the jobs pipe),
# MiniLM (real weights) and Qwen3-0.6B-shaped, --http-workers 4, alternating fresh servers.
cd "$(dirname "$0")/.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-serve/*.whl
. benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1; el setup; tail -2 /tmp/setup.log >> $OUT/steps.log
mkdir -p /tmp/before-src && tar -xf scratch/before.tar -C /tmp/before-src
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/before /tmp/before-src > /tmp/before.log 2>&1; el "before install rc=$?"
tail -3 /tmp/before.log >> $OUT/steps.log
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
timeout 200 python3 serve_online_ab.py --out $OUT/minilm --model $MINILM --system before=/tmp/before --system after= --workloads "query base64,query float" --clients 1,16 --rounds 2 --seconds 3 > $OUT/minilm/serve.log 2>&1; el "minilm ab rc=$?"
timeout 170 python3 serve_online_ab.py --out $OUT/qwen --model /tmp/embedpipe-bench-models/qwen3-0.6b --system before=/tmp/before --system after= --workloads "query base64" --clients 1,16 --rounds 2 --seconds 3 > $OUT/qwen/serve.log 2>&1; el "qwen ab rc=$?"
