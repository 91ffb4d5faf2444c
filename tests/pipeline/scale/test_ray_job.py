"""`index --ray` on a local Ray instance on the CPU with the default model: the same output as a local run,
resume, bad inputs; and how --devices maps onto a cluster's resources."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.corpus import assert_same_output, read_embeddings, variant_texts, write_corpus
from embedpipe.cli.main import app
from embedpipe.pipeline.config import ConfigError, DeviceSpec
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.api import index_with_ray
from embedpipe.pipeline.scale.ray_job import engine_pool
from embedpipe.pipeline.scale.ray_stages import tokenizer_split

LOCAL = ["--device", "cpu", "--workers", "0"]
COMMON = ["--rows-per-unit", "50", "--keep-columns", "source", "--quiet"]


@pytest.mark.parametrize("devices, resources, expected", [
    ("all", {"CPU": 64, "GPU": 8}, (8, "cuda")),
    ("gpu:2", {"CPU": 64, "GPU": 8}, (2, "cuda")),
    ("cpu:2", {"CPU": 3}, (2, "cpu")),
])
def test_devices_on_a_cluster(devices, resources, expected):
    assert engine_pool(DeviceSpec.parse(devices), resources) == expected


@pytest.mark.parametrize("devices, resources, message", [
    ("all", {"CPU": 64}, "has no GPUs; --devices cpu:N"),
    ("gpu:9", {"CPU": 64, "GPU": 8}, "the Ray cluster has 8 GPUs"),
    ("cpu:2", {"CPU": 2}, "needs more than 2 CPUs"),
])
def test_devices_a_cluster_cannot_run(devices, resources, message):
    with pytest.raises(ConfigError, match=message):
        engine_pool(DeviceSpec.parse(devices), resources)


@pytest.mark.parametrize("cpus, expected", [(15.0, (15, 1.0)), (7.5, (7, 7.5 / 7)), (0.5, (1, 0.5)), (0.0, (1, 0.0))])
def test_each_engine_shares_the_cpus_it_is_left_among_its_tokenizers(cpus, expected):
    assert tokenizer_split(cpus) == expected


def test_no_cluster_at_the_address_is_a_usage_error(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    if ray.is_initialized() or Path("/tmp/ray/ray_current_cluster").exists():
        pytest.skip("a Ray cluster is running here")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    write_corpus(tmp_path / "in", variant_texts(5), num_files=1, row_group_size=5)
    result = CliRunner().invoke(app, ["index", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                                      "--ray", "auto", "--devices", "cpu:1", "--quiet"])
    assert result.exit_code == 2 and "--ray auto: Could not find any running Ray instance" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def ray_session():
    """One local instance for the module. 3 logical CPUs: two engine actors hold one each, tokenizing needs one."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=3, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """160 rows in 2 files (4 units of 40 rows), a file with bad texts, and a local run of them."""
    folder = tmp_path_factory.mktemp("ray")
    write_corpus(folder / "in", variant_texts(160), num_files=2, row_group_size=20)
    pq.write_table(pa.table({"id": [9001, 9002, 9003], "text": ["fine", None, "  "], "source": ["bad"] * 3}),
                   folder / "in" / "with-bad-rows.parquet")
    result = CliRunner().invoke(app, ["index", str(folder / "in"), "--output", str(folder / "local"), *LOCAL, *COMMON])
    assert result.exit_code == 0, result.output
    return folder / "in", folder / "local"


@pytest.mark.slow
def test_ray_writes_what_a_local_run_writes(ray_session, corpus, tmp_path):
    inputs, local = corpus
    result = CliRunner().invoke(app, ["index", str(inputs), "--output", str(tmp_path / "out"), "--ray", "auto",
                                      "--devices", "cpu:2", *COMMON])
    assert result.exit_code == 0, result.output
    assert_same_output(tmp_path / "out", local)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["rows"], metrics["rejected_rows"], metrics["index"]["num_rows"]) == (161, 2, 161)
    assert sum(engine["units"] for engine in metrics["engines"]) == metrics["units"]["done"] == 5
    assert all(engine["device"].startswith("cpu on ") for engine in metrics["engines"])
    # Ray starts its engine actors inside the pipeline: the job clock starts once the first is ready, as a local
    # run's starts once its engine is loaded (then nothing lies between the progress opening and the clock)
    local_metrics = json.loads((local / "metrics.json").read_text())
    assert (metrics["startup"]["engine_start_in_pipeline_s"] > 0.0
            == local_metrics["startup"]["engine_start_in_pipeline_s"])
    assert metrics["start_s"] >= metrics["startup"]["engine_start_in_pipeline_s"]


@pytest.mark.slow
def test_ray_skips_the_completed_units(ray_session, corpus, tmp_path):
    inputs, local = corpus
    output = tmp_path / "out"
    first = CliRunner().invoke(app, ["index", str(inputs), "--output", str(output), "--shard-index", "0",
                                     "--num-shards", "2", *LOCAL, *COMMON])
    assert first.exit_code == 0, first.output
    done_first = completed_units(output)
    result = index_with_ray([inputs], output, devices="cpu:1", rows_per_unit=50, keep_columns=("source",), quiet=True)
    assert result.exit_code == 0
    assert {unit_id: completed_units(output)[unit_id] for unit_id in done_first} == done_first  # not redone
    assert result.metrics["rows"] + sum(record["num_rows"] for record in done_first.values()) == 161
    assert_same_output(output, local)


@pytest.mark.slow
def test_ray_reports_bad_files_like_a_local_run(ray_session, tmp_path):
    write_corpus(tmp_path / "in", variant_texts(20), num_files=1, row_group_size=20)
    (tmp_path / "in" / "z.jsonl").write_text('{"id": 50, "text": "fine"}\n{not json\n')
    args = ["index", str(tmp_path / "in"), "--ray", "auto", "--devices", "cpu:1", "--quiet"]
    skipped = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "skip"), "--skip-bad-files"])
    assert skipped.exit_code == 3, skipped.output
    metrics = json.loads((tmp_path / "skip" / "metrics.json").read_text())
    assert [bad["path"].rsplit("/", 1)[1] for bad in metrics["bad_files"]] == ["z.jsonl"]
    assert read_embeddings(tmp_path / "skip").num_rows == 20 and metrics["index"]["num_rows"] == 20
    failed = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "fail")])
    assert failed.exit_code == 2 and "z.jsonl: cannot read jsonl input" in failed.stderr


@pytest.mark.slow
def test_tokenize_on_ray_writes_what_a_local_tokenize_writes(ray_session, corpus, tmp_path):
    inputs, _ = corpus
    options = ["--rows-per-unit", "50", "--keep-columns", "source", "--quiet"]
    local = CliRunner().invoke(app, ["tokenize", str(inputs), "--output", str(tmp_path / "local"), "--workers", "1",
                                     *options])
    assert local.exit_code == 0, local.output
    result = CliRunner().invoke(app, ["tokenize", str(inputs), "--output", str(tmp_path / "ray"), "--ray", "auto",
                                      *options])
    assert result.exit_code == 0, result.output
    names = sorted(os.listdir(tmp_path / "local" / "tokens"))
    assert names == sorted(os.listdir(tmp_path / "ray" / "tokens")) and len(names) == 5
    for name in names:
        assert pq.read_table(tmp_path / "ray" / "tokens" / name).equals(
            pq.read_table(tmp_path / "local" / "tokens" / name))
    ours, theirs = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("ray", "local"))
    assert (ours["rows"], ours["rejected_rows"], ours["tokens"]) == (theirs["rows"], theirs["rejected_rows"],
                                                                   theirs["tokens"]) == (161, 2, theirs["tokens"])
