"""`embedpipe index` as a process, stopped by a fault: a killed tokenizer worker, Ctrl-C, SIGTERM, a second job.

Each run stops within seconds with an honest exit code and a message, leaves only complete,
recorded units and no process behind, and the same command run again finishes the job.
"""
from __future__ import annotations

import os
import signal
import time

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.numerics import cosine
from support.corpus import read_embeddings, variant_texts, vectors_of, write_corpus
from embedpipe.cli.main import app
from support.processes import (assert_consistent, num_records, run_fast, start_index, spawned_children, wait_for_units,
                       wait_until_gone)

pytestmark = pytest.mark.slow
NUM_ROWS = 1200  # 12 units of 100 rows: a few seconds of work for the tiny model
OPTIONS = ["--device", "cpu", "--rows-per-unit", "100", "--quiet"]


@pytest.fixture(scope="module")
def job(tmp_path_factory, tiny_model):
    """(input folder, options of the job); two Parquet files, row groups of 100 rows."""
    folder = tmp_path_factory.mktemp("faults")
    write_corpus(folder / "in", variant_texts(NUM_ROWS), num_files=2, row_group_size=100)
    return folder / "in", ["--model", tiny_model, *OPTIONS]


@pytest.fixture(scope="module")
def reference(job, tmp_path_factory):
    """The output of the job run without a fault."""
    inputs, options = job
    output = tmp_path_factory.mktemp("reference") / "out"
    result = run_fast(inputs, "--output", output, *options)
    assert result.returncode == 0, result.stderr
    return read_embeddings(output)


def assert_resumes_to(reference, inputs, output, options) -> None:
    """The same command, run again, ends with the uninterrupted run's rows: every input id once."""
    result = run_fast(inputs, "--output", output, *options)
    assert result.returncode == 0, result.stderr
    resumed = read_embeddings(output)
    assert resumed.column("id").equals(reference.column("id"))
    assert cosine(vectors_of(resumed), vectors_of(reference)).min() >= 0.99999
    assert_consistent(output)


def test_a_killed_tokenizer_worker_stops_the_job_with_its_cause(job, reference, tmp_path):
    inputs, options = job
    output = tmp_path / "out"
    process = start_index(inputs, "--output", output, *options, "--workers", "2")
    wait_for_units(process, output, 1)
    workers = spawned_children(process.pid)
    assert len(workers) == 2
    descendants = [child.pid for child in process.children(recursive=True)]
    workers[0].kill()
    killed_at = time.monotonic()
    assert process.wait(timeout=60) == 1
    assert time.monotonic() - killed_at < 15
    stderr = process.stderr.read()
    assert "tokenizer worker died (exit code -9, SIGKILL)" in stderr and "run the same command again" in stderr
    assert "Traceback" not in stderr
    assert wait_until_gone(descendants), "orphan processes"
    assert num_records(output) < 12
    assert_consistent(output)
    assert_resumes_to(reference, inputs, output, [*options, "--workers", "2"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_and_sigterm_stop_cleanly_and_a_rerun_finishes(job, reference, tmp_path, signum):
    inputs, options = job
    output = tmp_path / "out"
    process = start_index(inputs, "--output", output, *options, "--workers", "1")
    wait_for_units(process, output, 2)
    descendants = [child.pid for child in process.children(recursive=True)]
    os.killpg(process.pid, signum)  # as a terminal's Ctrl-C, or a scheduler stopping the task's group
    assert process.wait(timeout=60) == 128 + signum
    stderr = process.stderr.read()
    assert f"interrupted ({signal.Signals(signum).name}); the completed units are kept" in stderr
    assert "Traceback" not in stderr
    assert wait_until_gone(descendants), "orphan processes"
    assert 2 <= len(assert_consistent(output)) < 12
    assert_resumes_to(reference, inputs, output, options)


def test_a_killed_job_leaves_only_complete_files_and_a_rerun_clears_its_temporaries(job, reference, tmp_path):
    """SIGKILL (the OOM killer, a lost node) runs no handler: whatever stands at a final name is complete,
    the workers do not outlive the job, and the next run removes what the kill left half-written."""
    inputs, options = job
    output = tmp_path / "out"
    process = start_index(inputs, "--output", output, *options, "--workers", "1")
    wait_for_units(process, output, 2)
    descendants = [child.pid for child in process.children(recursive=True)]
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert wait_until_gone(descendants), "tokenizer workers outlived the killed job"
    for path in (output / "embeddings").glob("[!.]*"):
        pq.read_metadata(path)  # a file cut off by the kill would have no footer
    for folder, name in (("embeddings", "unit.parquet"), ("manifest", "unit.json"), (".", "index.faiss")):
        (output / folder / f".{name}.tmp-{process.pid}-x1y2").write_bytes(b"half written")  # as a kill leaves them
    assert_resumes_to(reference, inputs, output, options)


def test_a_second_job_on_the_same_output_is_refused_and_the_first_is_unharmed(job, reference, tmp_path):
    inputs, options = job
    output = tmp_path / "out"
    first = start_index(inputs, "--output", output, *options)
    wait_for_units(first, output, 1)
    # the most harmful second job: other settings with --overwrite would clear the first one's work
    second = CliRunner().invoke(app, ["index", str(inputs), "--output", str(output), *map(str, options),
                                      "--dim", "32", "--overwrite"])
    assert second.exit_code == 4, second.output
    assert f"{output} is being written by another run (pid {first.pid}, started" in second.stderr
    assert first.wait(timeout=120) == 0, first.stderr.read()
    assert read_embeddings(output).equals(reference)  # same settings, same batches: the same bits
    verified = CliRunner().invoke(app, ["verify", str(output), "--input", str(inputs)])
    assert verified.exit_code == 0, verified.output


def test_a_tokenizer_that_raises_stops_the_job_with_its_cause(job, tmp_path, monkeypatch):
    from embedpipe.pipeline.text.tokenizer import TextTokenizer

    inputs, options = job
    calls = iter(range(100))
    encode_flat = TextTokenizer.encode_flat  # what the job's tasks call

    def encode_until_the_fourth_chunk(self, texts):
        if next(calls) == 3:
            raise RuntimeError("the tokenizer broke")
        return encode_flat(self, texts)

    monkeypatch.setattr(TextTokenizer, "encode_flat", encode_until_the_fourth_chunk)  # in-process: --workers 0
    result = CliRunner().invoke(app, ["index", str(inputs), "--output", str(tmp_path / "out"), *map(str, options),
                                      "--workers", "0"])
    assert result.exit_code == 1
    assert "tokenizer raised RuntimeError: the tokenizer broke; the completed units are kept" in result.stderr
    assert len(assert_consistent(tmp_path / "out")) <= 3  # units past the failure are never counted done
