#!/usr/bin/env bash
# Call 3: HEAD end to end on the GPU, float32 vs int8 (zstd columns, SQ8 index), MiniLM 500k rows, alternated.
. benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
for round in 1 2; do
  for dtype in float32 int8; do
    timeout 100 python3 benchmarks/index_feed.py --models minilm --rows 500000 --rounds 1 --systems tokenize index-ids \
      --index-args "--dtype $dtype" --time-budget-s 90 --out $OUT/$dtype-$round > $OUT/$dtype-$round.log 2>&1
    grep "index-ids round 1:" $OUT/$dtype-$round.log | cut -c1-330 | sed "s/^/$dtype r$round /"
  done
done
