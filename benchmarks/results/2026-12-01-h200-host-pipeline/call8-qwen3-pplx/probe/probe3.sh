#!/usr/bin/env bash
# Call 3 probe: where the main thread of a MiniLM from-token-ids job waits (py-spy --idle, not pausing it).
export PATH=/tmp/site/bin:$PATH
W=/tmp/probe; mkdir -p $W $OUT/probe
python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
from pathlib import Path
from host_pipeline import random_corpus
from embedpipe.kernels.model_folder import builtin_models
random_corpus(Path('$W/corpus.parquet'), 500000, builtin_models()['minilm'])"
python3 -m embedpipe.cli.main tokenize $W/corpus.parquet --output $W/tok --quiet
python3 -m embedpipe.cli.main index $W/tok/tokens --output $W/warm --token-ids-column token_ids --quiet
py-spy record --nonblocking --idle --threads -r 500 -f raw -o $OUT/probe/py-spy-ids-idle.txt -- python3 -m embedpipe.cli.main index $W/tok/tokens --output $W/spy --token-ids-column token_ids --quiet > $OUT/probe/spy.log 2>&1
tail -3 $OUT/probe/spy.log; gzip -f $OUT/probe/py-spy-ids-idle.txt
python3 -c "import json; m=json.load(open('$W/warm/metrics.json')); print('plain run', round(m['tokens_per_s'])); m=json.load(open('$W/spy/metrics.json')); print('py-spy run', round(m['tokens_per_s']))"
pq() { python3 -c "import pyarrow.parquet as pq, glob; f=pq.ParquetFile(sorted(glob.glob('$W/tok/tokens/*.parquet'))[0]); print('token file row groups', f.metadata.num_row_groups, 'rows', f.metadata.num_rows)"; }; pq
