#!/usr/bin/env bash
# Call 2: before (ee2520c, scratch/old-src) and after the re-layout, MiniLM 500k rows, alternated, same machine.
. benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/oldsite scratch/old-src > $OUT/oldsite.log 2>&1
PYTHONPATH=/tmp/oldsite:$PYTHONPATH python3 -c "import embedpipe.pipeline.runner as r; print(r.__file__)" >> $OUT/oldsite.log 2>&1
for round in 1 2; do
  for version in old new; do
    if [ $version = old ]; then
      PYTHONPATH=/tmp/oldsite:$PYTHONPATH timeout 130 python3 scratch/old-src/benchmarks/index_feed.py --models minilm --rows 500000 \
        --rounds 1 --systems tokenize index index-ids --time-budget-s 120 --out $OUT/$version-$round > $OUT/$version-$round.log 2>&1
    else
      timeout 130 python3 benchmarks/index_feed.py --models minilm --rows 500000 \
        --rounds 1 --systems tokenize index index-ids --time-budget-s 120 --out $OUT/$version-$round > $OUT/$version-$round.log 2>&1
    fi
    grep "round 1:" $OUT/$version-$round.log | cut -c1-260 | sed "s/^/$version r$round /"
  done
done
