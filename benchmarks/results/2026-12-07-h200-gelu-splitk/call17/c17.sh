#!/usr/bin/env bash
# Device call 17 (issue 19): past call 12's sweep, whose deepest split-K pipeline (4 stages) won: 5 and 6 stages.
# split_k_bench.py --launch with those pairs (common.LAUNCHES replaced for the run), then the engine, `sk4` (call
# 12's sklaunch) against `sk5` (5 stages), BERT-base and Qwen3-0.6B, 3 rounds alternated. ~3 minutes. Carry:
# .whl-lite .gpu-lite.
cd "$(dirname "$0")/../../../.."
. benchmarks/device_call.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $OUT/steps.log
variant sk4 kernels/cuda/triton_split_k.py $'    num_stages: int = 3\n' $'    num_stages: int = 4  # sk4\n'
variant sk5 kernels/cuda/triton_split_k.py $'    num_stages: int = 3\n' $'    num_stages: int = 5  # sk5\n'
(cd benchmarks && PYTHONPATH=/tmp/sk4:$PYTHONPATH timeout $(left 60) python3 - > /tmp/logs/split.log 2>&1 <<PY
import runpy, sys
import common
common.LAUNCHES = ((4, 3), (4, 4), (4, 5), (4, 6), (8, 4))
sys.argv = ["split_k_bench.py", "--out", "$OUT/split-stages.json", "--launch", "--tokens", "16,128",
            "--shapes", "qwen3-0.6b o,qwen3-0.6b down,bert-base o,bert-base ffn2"]
runpy.run_path("split_k_bench.py", run_name="__main__")
PY
)
el "stage sweep rc=$?"
latency_step 150 bert-base sk4 sk5
latency_step 240 qwen3-0.6b sk4 sk5
pack_logs
