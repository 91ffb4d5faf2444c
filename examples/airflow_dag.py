"""Airflow: index a corpus over N parallel tasks, one shard each, then merge the shards' index and verify.

    index_shard_0 .. index_shard_{N-1}  ->  merge_index  ->  verify

Shard task I runs `embedpipe index INPUTS --shard-index I --num-shards N` into OUTPUT/shard-I, on
whatever worker Airflow gives it. `merge` builds one FAISS index of all shards into OUTPUT/index and
refuses shards that miss a unit; `verify` checks the shards' embeddings against the inputs. Every
worker must see INPUTS and OUTPUT at the same paths (a shared filesystem). A failed or killed shard
task is simply retried: the units it completed are kept and the retry does the rest.

Copy this file into the DAGs folder. Per run, set the params (the trigger form, or `airflow dags
trigger embedpipe_index --conf '{"inputs": "/data/corpus/"}'`): `inputs`, `output` and
`index_options` (e.g. "--model minilm --devices all --keep-columns title,url" on GPU workers; the
default, --device auto, runs on CPU workers too). They reach the tasks' environment when the task
runs, so a path needs no quoting. The number of shards is the DAG's shape: it is read from
EMBEDPIPE_SHARDS in the environment of the process that parses this file (the scheduler and the
DAG processor), when it parses it, default 4.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow import DAG

try:
    from airflow.sdk import Param  # Airflow 3
except ImportError:
    from airflow.models.param import Param  # Airflow 2
try:
    from airflow.providers.standard.operators.bash import BashOperator  # Airflow 3
except ImportError:
    from airflow.operators.bash import BashOperator  # Airflow 2

NUM_SHARDS = int(os.environ.get("EMBEDPIPE_SHARDS", "4"))  # parse time: the number of tasks
PARAMS = {"inputs": Param("/shared/corpus/", type="string", description="Input files or folders (one path)."),
          "output": Param("/shared/embeddings", type="string", description="Shards go to OUTPUT/shard-I, "
                                                                            "the merged index to OUTPUT/index."),
          "index_options": Param("--model minilm --keep-columns title,url", type="string",
                                 description="More `embedpipe index` options, e.g. --devices all on GPU workers.")}
# the params, rendered when a task runs, into its environment (appended to the worker's: PATH stays)
ENV = {"EMBEDPIPE_INPUTS": "{{ params.inputs }}", "EMBEDPIPE_OUTPUT": "{{ params.output }}",
       "EMBEDPIPE_INDEX_OPTIONS": "{{ params.index_options }}"}
SHARD_OUTPUTS = " ".join(f'"$EMBEDPIPE_OUTPUT/shard-{shard}"' for shard in range(NUM_SHARDS))


def index_command(shard: int) -> str:
    return (f'embedpipe index "$EMBEDPIPE_INPUTS" --output "$EMBEDPIPE_OUTPUT/shard-{shard}" '
            f"--shard-index {shard} --num-shards {NUM_SHARDS} $EMBEDPIPE_INDEX_OPTIONS")


MERGE_COMMAND = f'embedpipe merge {SHARD_OUTPUTS} --into "$EMBEDPIPE_OUTPUT/index"'
VERIFY_COMMAND = (f'embedpipe verify {SHARD_OUTPUTS} --index "$EMBEDPIPE_OUTPUT/index" '
                  '--input "$EMBEDPIPE_INPUTS"')  # exit 0 only when all checks hold

with DAG(dag_id="embedpipe_index", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, params=PARAMS,
         default_args={"retries": 2, "retry_delay": timedelta(minutes=5)}, tags=["embedpipe"]) as dag:
    shards = [BashOperator(task_id=f"index_shard_{shard}", bash_command=index_command(shard), env=ENV,
                           append_env=True) for shard in range(NUM_SHARDS)]
    merge = BashOperator(task_id="merge_index", bash_command=MERGE_COMMAND, env=ENV, append_env=True)
    verify = BashOperator(task_id="verify", bash_command=VERIFY_COMMAND, env=ENV, append_env=True)
    shards >> merge >> verify
