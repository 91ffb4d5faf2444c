#!/usr/bin/env bash
# Device call 6 (issue 25): --ray local vs --devices 0 on one H200 after the Ray job clock starts at the engine
# actors' ready time; BERT-base shape, 200,000 rows, one round.
cd "$(dirname "$0")/.."
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a $OUT/steps.log; }
mkdir -p /tmp/site && tar -xJf .gpu-lite/minilm-nomodel.tar.xz -C /tmp/site
. benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1; el setup; tail -3 /tmp/setup.log >> $OUT/steps.log
python3 -c "import ray, ray.data; print('ray', ray.__version__)" >> $OUT/steps.log 2>&1
timeout 200 python3 benchmarks/multi_gpu_scaling.py --models bert-base --rows 200000 --gpus 1 --ray local --rounds 1 --out $OUT/bert-base > $OUT/scaling.log 2>&1; el "scaling rc=$?"
