#!/usr/bin/env bash
# One device call: install the carried wheels, run the GPU tests, run the engine benchmark.
# Usage (on the GPU machine, repo root, with .whl carried): bash benchmarks/gpu_check.sh [bench args...]
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
if [ -f .fi-cache/flashinfer.tgz ]; then mkdir -p ~/.cache && tar -xzf .fi-cache/flashinfer.tgz -C ~/.cache; fi
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv
python3 -c "import torch, flashinfer; print('torch', torch.__version__, 'flashinfer', flashinfer.__version__)"
