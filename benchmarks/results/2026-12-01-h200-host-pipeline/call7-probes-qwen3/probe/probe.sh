#!/usr/bin/env bash
# Call 2 probes: MiniLM from token ids under GIL switch intervals, the finish's phases, a py-spy of the ids job.
W=/tmp/probe; mkdir -p $W $OUT/probe
python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
from pathlib import Path
from host_pipeline import random_corpus
from embedpipe.kernels.model_folder import builtin_models
random_corpus(Path('$W/corpus.parquet'), 500000, builtin_models()['minilm'])"
python3 -m embedpipe.cli.main tokenize $W/corpus.parquet --output $W/tok --quiet
ids() {  # $1: switch interval, $2: output
  rm -rf $2; s=$(date +%s%N)
  python3 -c "import sys; sys.setswitchinterval($1); sys.argv=['embedpipe','index','$W/tok/tokens','--output','$2','--token-ids-column','token_ids','--quiet']; from embedpipe.cli.main import main; main()"
  e=$(date +%s%N)
  python3 -c "import json; m=json.load(open('$2/metrics.json')); print('switch $1', round(m['tokens_per_s']), 'job', round(m['seconds'],2), 'wall', ($e-$s)/1e9, 'start', round(m['start_s'],2), 'finish', round(m['finish_s'],2), m.get('startup'))"
}
python3 benchmarks/index_feed.py --help > /dev/null  # (imports warm)
for r in 1 2; do for sw in 0.005 0.001 0.0002; do ids $sw $W/ids-$sw; done; done 2>&1 | tee $OUT/probe/switch.txt
python3 scratch/probe_finish.py $W/ids-0.005 > $OUT/probe/finish.txt 2>&1; tail -25 $OUT/probe/finish.txt
rm -rf $W/spy; py-spy record --nonblocking --threads -r 250 -f raw -o $OUT/probe/py-spy-ids.txt -- python3 -m embedpipe.cli.main index $W/tok/tokens --output $W/spy --token-ids-column token_ids --quiet > /dev/null 2>&1
gzip $OUT/probe/py-spy-ids.txt; python3 -c "import json; m=json.load(open('$W/spy/metrics.json')); print('py-spy run', round(m['tokens_per_s']))"
