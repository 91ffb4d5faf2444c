#!/usr/bin/env bash
# Session 2026-12-01b, call 1: the GPU tests after the re-layout, then MiniLM's feed against the engine.
. benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
git log --oneline -1 > $OUT/commit.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_gpu_engine.py tests/e2e/test_warmup.py > $OUT/gpu-tests.log 2>&1
echo "gpu tests rc=$?" >> $OUT/gpu-tests.log
timeout 300 python3 benchmarks/index_feed.py --models minilm --rows 500000 --rounds 2 --systems index-ids engine index \
  --time-budget-s 270 --out $OUT/feed > $OUT/feed.log 2>&1
echo "feed rc=$?" >> $OUT/feed.log
tail -5 $OUT/gpu-tests.log; tail -25 $OUT/feed.log
