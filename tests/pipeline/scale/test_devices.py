"""`index --devices`: the syntax, and cpu:2 end to end as CI runs the multi-GPU code path: two engine
processes on one unit queue write what one engine writes; a dead engine or a bad input stops the job."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from support.paths import REPO
from support.corpus import assert_same_output, index_command, read_embeddings, run_index, variant_texts, write_corpus
from embedpipe.cli.main import app
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.config import ConfigError, DeviceSpec, IndexOptions, job_config, merge_options
from embedpipe.pipeline.batching.batcher import BatchStats
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.index.report import EngineReport, run_metrics
from support.processes import spawned_children, wait_until_gone

UNIT_OPTIONS = ["--rows-per-unit", "50", "--quiet"]
CONFIGS = REPO / "configs"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-bert")
    write_random_model("tiny-bert", folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """600 rows in 2 files (12 units of 50), and a file of 5 rows, 3 of them with bad texts."""
    folder = tmp_path_factory.mktemp("devices") / "in"
    write_corpus(folder, variant_texts(600), num_files=2, row_group_size=25)
    pq.write_table(pa.table({"id": [7001, 7002, 7003, 7004, 7005], "text": ["a", None, "", " ", "b"],
                             "source": ["bad"] * 5}), folder / "with-bad-rows.parquet")
    return folder


@pytest.fixture(scope="module")
def one_engine(corpus, tiny_model):
    output = corpus.parent / "one-engine"
    result = CliRunner().invoke(app, ["index", str(corpus), "--output", str(output), "--model", str(tiny_model),
                                      "--device", "cpu", "--keep-columns", "source", *UNIT_OPTIONS])
    assert result.exit_code == 0, result.output
    return output


@pytest.mark.parametrize("text, expected", [
    ("all", DeviceSpec("cuda")),
    ("0,1,3", DeviceSpec("cuda", indices=(0, 1, 3))),
    (" 2 ", DeviceSpec("cuda", indices=(2,))),
    ("gpu:4", DeviceSpec("cuda", count=4)),
    ("CPU:2", DeviceSpec("cpu", count=2)),
])
def test_device_specs(text, expected):
    assert DeviceSpec.parse(text) == expected


@pytest.mark.parametrize("text, message", [
    ("cpu:0", "positive integer"), ("cpu:two", "positive integer"), ("gpu:", "positive integer"),
    ("0,0", "names a device twice"), ("cuda:1", "must be all, CUDA device indices"), ("1;2", "must be all"),
])
def test_bad_device_specs_say_what_is_accepted(text, message):
    with pytest.raises(ConfigError, match=message):
        DeviceSpec.parse(text)


@pytest.mark.parametrize("options, message", [
    ({"devices": "cpu:2", "device": "cuda"}, "device 'cuda' and devices 'cpu:2' disagree"),
    ({"devices": "all", "device": "cpu"}, "device 'cpu' and devices 'all' disagree"),
    ({"ray": "auto", "device": "cpu"}, "device 'cpu' and devices 'all' disagree"),
    ({"ray": "auto", "devices": "0,1"}, "the cluster assigns the GPUs"),
])
def test_engine_options_that_contradict_each_other(options, message):
    with pytest.raises(ConfigError, match=message):
        job_config(IndexOptions(inputs=("x.parquet",), output="out", **options))


def test_devices_take_a_gpu_config_file_of_one_engine():
    options = merge_options(CONFIGS / "bert-base-gpu.toml", {"inputs": ("x",), "output": "out", "devices": "0,1"})
    job = job_config(options)
    assert job.devices == DeviceSpec("cuda", indices=(0, 1)) and job.batching.max_batch_tokens == 32768


def test_cpu_engines_get_cpu_batches_and_tokenize_in_their_process():
    job = job_config(IndexOptions(inputs=("x.parquet",), output="out", devices="cpu:2"))
    assert job.devices == DeviceSpec("cpu", count=2) and job.batching.max_batch_tokens == 4096
    assert job.num_workers == 0


def test_the_metrics_of_a_run_add_up_its_engines():
    first = EngineReport("cuda:0", units=2, rows=10, tokens=100, rejected=1, truncated=1,
                         batches=BatchStats(2, 10, 100, 128), graphs={"eager_runs": 1, "graph_captures": 1,
                                                                      "graph_replays": 3}, attention="fa3 (measured)")
    second = EngineReport("cuda:1", units=1, rows=5, tokens=60, batches=BatchStats(1, 5, 60, 64),
                          attention="fa3 (measured)")
    metrics = run_metrics([first, second], seconds=2.0)
    assert (metrics["rows"], metrics["tokens"], metrics["rejected_rows"], metrics["truncated_texts"]) == (15, 160, 1, 1)
    assert metrics["batches"] == 3 and metrics["padding_waste"] == pytest.approx(32 / 192)
    assert metrics["tokens_per_s"] == 80 and metrics["embeddings_per_s"] == 7.5
    assert metrics["engine"] == {"device": "cuda:0, cuda:1", "eager_runs": 1, "graph_captures": 1, "graph_replays": 3,
                                 "attention": "fa3 (measured)"}
    assert [(engine["device"], engine["units"]) for engine in metrics["engines"]] == [("cuda:0", 2), ("cuda:1", 1)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without GPUs")
def test_all_gpus_without_a_gpu_fails_before_any_output(tmp_path, corpus):
    result = CliRunner().invoke(app, ["index", str(corpus), "--output", str(tmp_path / "out"), "--devices", "all"])
    assert result.exit_code == 2 and "no CUDA device is visible" in result.stderr and "cpu:N" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_cpu_engines_write_what_one_engine_writes(tmp_path, corpus, tiny_model, one_engine):
    output = tmp_path / "two-engines"
    result = run_index(corpus, "--output", output, "--model", tiny_model, "--devices", "cpu:2",
                       "--keep-columns", "source", *UNIT_OPTIONS)
    assert result.returncode == 0, result.stderr
    assert_same_output(output, one_engine)
    metrics = json.loads((output / "metrics.json").read_text())
    assert [engine["device"] for engine in metrics["engines"]] == ["cpu", "cpu"]
    assert sum(engine["units"] for engine in metrics["engines"]) == metrics["units"]["done"] == 13
    assert (metrics["rows"], metrics["rejected_rows"], metrics["index"]["num_rows"]) == (602, 3, 602)


@pytest.mark.slow
def test_a_dead_engine_stops_the_job_and_the_rerun_completes_it(tmp_path, tiny_model):
    write_corpus(tmp_path / "in", variant_texts(3000), num_files=2, row_group_size=50)
    args = [tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model, "--devices", "cpu:2", *UNIT_OPTIONS]
    process = subprocess.Popen(index_command(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    manifest, deadline = tmp_path / "out" / "manifest", time.monotonic() + 120
    while not (manifest.is_dir() and len(os.listdir(manifest)) >= 3) and time.monotonic() < deadline:
        time.sleep(0.02)
    engines = spawned_children(process.pid)  # the engine processes
    assert process.poll() is None and len(engines) == 2, "the job ended before an engine could be killed"
    engines[0].send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)  # the parent notices; no hang
    assert process.returncode == 1, stderr
    # it was "the engine process on cpu died", on --devices cpu:2 naming no engine, with the resume advice twice
    assert re.search(rf"engine process [01] of 2 \(cpu, pid {engines[0].pid}\) died \(exit code -9, SIGKILL\)", stderr)
    assert stderr.count("run the same command again") == 1 and "Traceback" not in stderr, stderr
    assert not engines[1].is_running()  # stopped, not left behind
    done_before = len(completed_units(tmp_path / "out"))
    assert 3 <= done_before < 60
    result = run_index(*args)
    assert result.returncode == 0, result.stderr
    table = read_embeddings(tmp_path / "out")
    assert table.column("id").to_pylist() == list(range(1000, 4000))
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["units"]["done"] == 60 and metrics["rows"] == 3000 - 50 * done_before
    assert not [name for name in os.listdir(tmp_path / "out" / "embeddings") if name.startswith(".")]


@pytest.mark.slow
@pytest.mark.parametrize("engines", [["--devices", "cpu:2"], ["--device", "cpu", "--workers", "2"]])
def test_engines_that_cannot_load_fail_the_job_before_any_output(tmp_path, corpus, tiny_model, engines):
    """Engines (engine processes, or the in-process engine with its tokenizer workers) load before
    the job writes anything; their error is the job's, and no process is left."""
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    process = subprocess.Popen(index_command(corpus, "--output", tmp_path / "out", "--model", broken,
                                             *engines, *UNIT_OPTIONS),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    engine_pids: set[int] = set()  # engine processes or tokenizer workers
    while process.poll() is None:
        with contextlib.suppress(psutil.Error):  # a child may end while it is listed
            engine_pids.update(child.pid for child in spawned_children(process.pid))
        time.sleep(0.02)
    stderr = process.stderr.read()
    assert process.returncode == 2, stderr
    assert f"{weights} is not a readable safetensors file" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()
    assert len(engine_pids) == 2 and wait_until_gone(list(engine_pids))


@pytest.mark.slow
def test_an_input_error_in_an_engine_process_fails_the_job_with_its_message(tmp_path, corpus, tiny_model):
    pq.write_table(pa.table({"id": [1], "body": ["no text column"]}), tmp_path / "zz.parquet")
    result = run_index(corpus, tmp_path / "zz.parquet", "--output", tmp_path / "out", "--model", tiny_model,
                       "--devices", "cpu:2", *UNIT_OPTIONS)
    assert result.returncode == 2, result.stderr
    assert "zz.parquet: text column 'text' not found; columns are: id, body" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "index.faiss").exists()
