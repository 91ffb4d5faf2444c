"""examples/airflow_dag.py, loaded with a stand-in for Airflow: its tasks and their order, its commands
rendered as a run renders them (params into each task's environment) and parsed as `embedpipe` parses them,
then run end to end on the sample corpus."""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import types

import jinja2
import pytest
import typer

from embedpipe.cli.main import app

from support.paths import REPO

DAG_FILE = REPO / "examples" / "airflow_dag.py"


class StandInDAG:
    current: StandInDAG | None = None

    def __init__(self, dag_id: str, params: dict | None = None, **kwargs):
        self.dag_id, self.params, self.kwargs, self.tasks = dag_id, params or {}, kwargs, {}

    def __enter__(self):
        StandInDAG.current = self
        return self

    def __exit__(self, *exc):
        StandInDAG.current = None


class StandInParam:
    def __init__(self, default, **kwargs):
        self.default = default


class StandInBashOperator:
    def __init__(self, task_id: str, bash_command: str, env: dict | None = None, append_env: bool = False, **kwargs):
        self.task_id, self.bash_command, self.env, self.append_env = task_id, bash_command, env or {}, append_env
        self.downstream = set()
        StandInDAG.current.tasks[task_id] = self

    def __rshift__(self, other):
        self.downstream.add(other.task_id)
        return other

    def __rrshift__(self, upstream: list):
        for task in upstream:
            task >> self
        return self

    def rendered_env(self, dag: StandInDAG, conf: dict) -> dict:
        """The task's environment as Airflow renders it for a run triggered with `conf`."""
        params = {name: param.default for name, param in dag.params.items()} | conf
        return {name: jinja2.Template(value).render(params=params) for name, value in self.env.items()}


@pytest.fixture
def dag(monkeypatch):
    airflow = types.ModuleType("airflow")
    airflow.DAG = StandInDAG
    param = types.ModuleType("airflow.models.param")
    param.Param = StandInParam
    bash = types.ModuleType("airflow.operators.bash")
    bash.BashOperator = StandInBashOperator
    for name, module in {"airflow": airflow, "airflow.models": types.ModuleType("airflow.models"),
                         "airflow.models.param": param, "airflow.operators": types.ModuleType("airflow.operators"),
                         "airflow.operators.bash": bash}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("EMBEDPIPE_SHARDS", "3")  # read when the file is parsed
    spec = importlib.util.spec_from_file_location("airflow_dag", DAG_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def parse(task: StandInBashOperator, dag: StandInDAG, conf: dict):
    """The task's command with its rendered environment expanded, parsed as the CLI would (UsageError if wrong)."""
    env = task.rendered_env(dag, conf)
    words = shlex.split(subprocess.run(["bash", "-c", f'printf "%q " {task.bash_command}'], env={**os.environ, **env},
                                       capture_output=True, text=True, check=True).stdout)
    program, name, *args = words
    commands = typer.main.get_command(app).commands
    assert program == "embedpipe" and name in commands, f"not an embedpipe command: {task.bash_command}"
    return commands[name].make_context(name, args)


def test_shards_fan_in_to_merge_then_verify(dag):
    assert sorted(dag.tasks) == ["index_shard_0", "index_shard_1", "index_shard_2", "merge_index", "verify"]
    for shard in range(3):
        task = dag.tasks[f"index_shard_{shard}"]
        assert task.downstream == {"merge_index"} and task.append_env  # the worker's PATH stays
        assert f"--shard-index {shard} --num-shards 3" in task.bash_command
    assert dag.tasks["merge_index"].downstream == {"verify"}


def test_the_rendered_commands_parse_with_paths_that_need_quoting(dag):
    conf = {"inputs": "/data/my corpus/", "output": "/data/out dir"}
    index = parse(dag.tasks["index_shard_1"], dag, conf).params
    assert index["inputs"] == ["/data/my corpus/"] and index["output"] == "/data/out dir/shard-1"
    assert (index["shard_index"], index["num_shards"]) == (1, 3)
    assert index["devices"] is None and index["device"] == "auto"  # the default runs on a CPU worker too
    merge = parse(dag.tasks["merge_index"], dag, conf).params
    assert [str(path) for path in merge["outputs"]] == [f"/data/out dir/shard-{i}" for i in range(3)]
    parse(dag.tasks["verify"], dag, conf)


def test_the_dag_runs_end_to_end_on_the_sample_corpus(dag, tmp_path):
    """Every task's rendered command, in the DAG's order, on examples/sample.parquet; verify exits 0."""
    (tmp_path / "my corpus").mkdir()
    shutil.copy(REPO / "examples" / "sample.parquet", tmp_path / "my corpus" / "sample.parquet")
    conf = {"inputs": str(tmp_path / "my corpus"), "output": str(tmp_path / "out dir"),
            "index_options": "--device cpu --rows-per-unit 100 --quiet"}
    bin_dir = os.path.dirname(sys.executable)  # the `embedpipe` of this environment
    for task_id in ["index_shard_0", "index_shard_1", "index_shard_2", "merge_index", "verify"]:
        task = dag.tasks[task_id]
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **task.rendered_env(dag, conf)}
        result = subprocess.run(["bash", "-c", task.bash_command], env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (task_id, result.stderr)
    assert (tmp_path / "out dir" / "index" / "index.faiss").is_file()
