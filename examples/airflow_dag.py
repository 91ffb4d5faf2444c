"""Airflow: index a corpus over N parallel tasks, one shard each, then merge the shards' index and verify.

    index_shard_0 .. index_shard_{N-1}  ->  merge_index  ->  verify

Shard task I runs `embedpipe index INPUTS --shard-index I --num-shards N` into OUTPUT/shard-I, on
whatever worker Airflow gives it (with --devices all, on every GPU of that worker). `merge` builds
one FAISS index of all shards into OUTPUT/index and refuses shards that miss a unit; `verify`
checks the shards' embeddings against the inputs. Every worker must see INPUTS and OUTPUT at the same
paths (a shared filesystem). A failed or killed shard task is simply retried: the units it
completed are kept and the retry does the rest.

Copy this file into the DAGs folder and set EMBEDPIPE_INPUTS, EMBEDPIPE_OUTPUT, EMBEDPIPE_SHARDS and
EMBEDPIPE_INDEX_OPTIONS in the workers' environment (or edit the defaults below).
"""
from __future__ import annotations

import os
import shlex
from datetime import datetime, timedelta

from airflow import DAG

try:
    from airflow.providers.standard.operators.bash import BashOperator  # Airflow 3
except ImportError:
    from airflow.operators.bash import BashOperator  # Airflow 2

INPUTS = os.environ.get("EMBEDPIPE_INPUTS", "/shared/corpus/")
OUTPUT = os.environ.get("EMBEDPIPE_OUTPUT", "/shared/embeddings")
NUM_SHARDS = int(os.environ.get("EMBEDPIPE_SHARDS", "4"))
INDEX_OPTIONS = os.environ.get("EMBEDPIPE_INDEX_OPTIONS", "--model minilm --devices all --keep-columns title,url")


def shard_output(shard: int) -> str:
    return f"{OUTPUT}/shard-{shard}"


def index_command(shard: int) -> str:
    return (f"embedpipe index {shlex.quote(INPUTS)} --output {shlex.quote(shard_output(shard))} "
            f"--shard-index {shard} --num-shards {NUM_SHARDS} {INDEX_OPTIONS}")


SHARD_OUTPUTS = " ".join(shlex.quote(shard_output(shard)) for shard in range(NUM_SHARDS))
MERGE_COMMAND = f"embedpipe merge {SHARD_OUTPUTS} --into {shlex.quote(OUTPUT + '/index')}"
VERIFY_COMMAND = (f"embedpipe verify {SHARD_OUTPUTS} --index {shlex.quote(OUTPUT + '/index')} "
                  f"--input {shlex.quote(INPUTS)}")  # exit 0 only when all checks hold

with DAG(dag_id="embedpipe_index", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
         default_args={"retries": 2, "retry_delay": timedelta(minutes=5)}, tags=["embedpipe"]) as dag:
    shards = [BashOperator(task_id=f"index_shard_{shard}", bash_command=index_command(shard))
              for shard in range(NUM_SHARDS)]
    merge = BashOperator(task_id="merge_index", bash_command=MERGE_COMMAND)
    verify = BashOperator(task_id="verify", bash_command=VERIFY_COMMAND)
    shards >> merge >> verify
