"""examples/airflow_dag.py, loaded with a stand-in for Airflow: its tasks, their order, and that every
command it runs is one our CLI accepts (options parsed as `embedpipe` parses them, nothing run)."""
from __future__ import annotations

import importlib.util
import shlex
import sys
import types

import pytest
import typer

from embedpipe.cli.main import app

from support.paths import REPO

DAG_FILE = REPO / "examples" / "airflow_dag.py"


class StandInDAG:
    current: StandInDAG | None = None

    def __init__(self, dag_id: str, **kwargs):
        self.dag_id, self.kwargs, self.tasks = dag_id, kwargs, {}

    def __enter__(self):
        StandInDAG.current = self
        return self

    def __exit__(self, *exc):
        StandInDAG.current = None


class StandInBashOperator:
    def __init__(self, task_id: str, bash_command: str, **kwargs):
        self.task_id, self.bash_command, self.downstream = task_id, bash_command, set()
        StandInDAG.current.tasks[task_id] = self

    def __rshift__(self, other):
        self.downstream.add(other.task_id)
        return other

    def __rrshift__(self, upstream: list):
        for task in upstream:
            task >> self
        return self


@pytest.fixture
def dag(monkeypatch, tmp_path):
    airflow = types.ModuleType("airflow")
    airflow.DAG = StandInDAG
    bash = types.ModuleType("airflow.operators.bash")
    bash.BashOperator = StandInBashOperator
    for name, module in {"airflow": airflow, "airflow.operators": types.ModuleType("airflow.operators"),
                         "airflow.operators.bash": bash}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("EMBEDPIPE_INPUTS", str(tmp_path / "my corpus"))
    monkeypatch.setenv("EMBEDPIPE_SHARDS", "3")
    for name in ("EMBEDPIPE_OUTPUT", "EMBEDPIPE_INDEX_OPTIONS"):  # the defaults in the file
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("airflow_dag", DAG_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def commands() -> dict:
    return typer.main.get_command(app).commands


def parse(command: str):
    """Parses an `embedpipe ...` command line as the CLI would, without running it; UsageError if it is wrong."""
    program, name, *args = shlex.split(command)
    assert program == "embedpipe" and name in commands(), f"not an embedpipe command: {command}"
    return commands()[name].make_context(name, args)


def test_shards_fan_in_to_merge_then_verify(dag):
    assert sorted(dag.tasks) == ["index_shard_0", "index_shard_1", "index_shard_2", "merge_index", "verify"]
    for shard in range(3):
        task = dag.tasks[f"index_shard_{shard}"]
        assert task.downstream == {"merge_index"}
        assert f"--shard-index {shard} --num-shards 3" in task.bash_command
    assert dag.tasks["merge_index"].downstream == {"verify"}


def test_index_and_merge_commands_parse(dag):
    for task_id in ["index_shard_0", "index_shard_2", "merge_index"]:
        parse(dag.tasks[task_id].bash_command)
    index = parse(dag.tasks["index_shard_1"].bash_command).params
    assert index["inputs"][0].endswith("my corpus") and index["devices"] == "all"
    assert (index["shard_index"], index["num_shards"]) == (1, 3)
    merge = parse(dag.tasks["merge_index"].bash_command).params
    assert [path.name for path in merge["outputs"]] == ["shard-0", "shard-1", "shard-2"]


def test_verify_command_parses(dag):
    parse(dag.tasks["verify"].bash_command)
