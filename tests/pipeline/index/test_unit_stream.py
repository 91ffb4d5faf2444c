"""UnitStream: units handed one at a time to one running engine (as the Ray engine actor hands them) are
written as a local run writes them, batches spanning units; each unit's report is its share of the totals;
a bad file is skipped or stops the stream as in a local run. On the CPU, with the default model."""
from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.corpus import assert_same_output, read_embeddings, variant_texts, write_corpus
from embedpipe.cli.main import app
from embedpipe.pipeline.batching.batcher import BatchStats
from embedpipe.pipeline.config import IndexOptions, job_config
from embedpipe.pipeline.index.job import load_engine, run_job
from embedpipe.pipeline.index.plan import job_tokenizer, prepare_job
from embedpipe.pipeline.index.reader import unit_tasks
from embedpipe.pipeline.index.report import EngineReport
from embedpipe.pipeline.index import unit_files
from embedpipe.pipeline.index.unit_stream import UnitStream
from embedpipe.pipeline.inputs.sources import InputError
from embedpipe.pipeline.output.manifest import completed_units

OPTIONS = {"device": "cpu", "workers": 0, "rows_per_unit": 30, "keep_columns": ("source",), "quiet": True}


class StreamEngine:
    """An Embedder that tokenizes each pending unit here and hands it to one UnitStream, as the Ray actor does.

    gated: the first unit's chunks wait for every unit to be submitted, so none is waiting on the next."""

    def __init__(self, job, tokenizer, gated: bool = False):
        self.job, self.tokenizer, self.gated = job, tokenizer, gated
        self.futures: list[Future] = []

    def __enter__(self) -> StreamEngine:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def embed(self, prepared, progress) -> list[EngineReport]:
        stream = UnitStream(self.job, load_engine(self.job.engine), "stream")
        submitted = threading.Event()
        for number, unit in enumerate(prepared.pending):
            chunks = unit_chunks(self.job, self.tokenizer, unit)
            if number == 0 and self.gated:
                chunks = gate(chunks, submitted)
            self.futures.append(stream.submit(unit.unit_id, chunks))
        submitted.set()
        reports = [future.result(timeout=120) for future in self.futures]
        stream.close()
        return [sum(reports, EngineReport("stream"))]


def unit_chunks(job, tokenizer, unit) -> list:
    """The unit's chunks, in order, as the Ray tokenizer actors make them (ray_stages.TokenizerActor)."""
    return [chunk for task in unit_tasks(job, [unit]) for chunk in task.run(tokenizer)]


def pending_units(inputs: Path, output: Path):
    """(job, tokenizer, its pending units) of a stream test's job on `inputs`, OUTPUT made."""
    job = job_config(IndexOptions(inputs=(str(inputs),), output=str(output), **OPTIONS))
    spec, tokenizer = job_tokenizer(job)
    output.mkdir()
    return job, tokenizer, prepare_job(job, spec, tokenizer).pending


def gate(chunks, opened: threading.Event):
    opened.wait(60)
    yield from chunks


def opened(engines: list[StreamEngine], **kwargs):
    """run_job's open_embedder, keeping each StreamEngine it opens in `engines`."""
    def open_engine(job, tokenizer) -> StreamEngine:
        engines.append(StreamEngine(job, tokenizer, **kwargs))
        return engines[-1]
    return open_engine


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """200 rows in 2 files (8 units of up to 30 rows: units are whole row groups of 10), a file with bad
    rows, and a local run of them."""
    folder = tmp_path_factory.mktemp("stream")
    write_corpus(folder / "in", variant_texts(200), num_files=2, row_group_size=10)
    pq.write_table(pa.table({"id": [9001, 9002, 9003], "text": ["fine", None, "  "], "source": ["bad"] * 3}),
                   folder / "in" / "with-bad-rows.parquet")
    result = CliRunner().invoke(app, ["index", str(folder / "in"), "--output", str(folder / "local"), "--device",
                                      "cpu", "--workers", "0", "--rows-per-unit", "30", "--keep-columns", "source",
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    return folder / "in", folder / "local"


def metrics_of(output: Path) -> dict:
    return json.loads((output / "metrics.json").read_text())


def test_a_stream_writes_what_a_local_run_writes_in_the_same_batches(corpus, tmp_path):
    inputs, local = corpus
    job = job_config(IndexOptions(inputs=(str(inputs),), output=str(tmp_path / "out"), **OPTIONS))
    engines: list[StreamEngine] = []
    result = run_job(job, opened(engines, gated=True))
    assert result.exit_code == 0
    assert_same_output(tmp_path / "out", local)
    ours, theirs = metrics_of(tmp_path / "out"), metrics_of(local)
    # every unit waited in the queue, none flushed alone: the batches are the local run's, spanning units
    for key in ("rows", "rejected_rows", "tokens", "batches", "padding_waste"):
        assert ours[key] == theirs[key], key
    units = completed_units(tmp_path / "out")
    assert ours["batches"] < len(units) == 9
    reports = [future.result() for future in engines[0].futures]
    assert [report.units for report in reports] == [1] * 9  # each report: its own unit, and its rows
    assert sorted(report.rows for report in reports) == sorted(record["num_rows"] for record in units.values())
    assert sum(report.tokens for report in reports) == ours["tokens"]
    assert sum(report.batches.batches for report in reports) == ours["batches"]


def test_units_handed_one_at_a_time_are_each_finished_before_the_next_comes(corpus, tmp_path):
    job, tokenizer, pending = pending_units(corpus[0], tmp_path / "out")
    stream, batches = UnitStream(job, load_engine(job.engine), "stream"), 0
    for unit in pending:  # the next unit is submitted only once the last one's report is out
        report = stream.submit(unit.unit_id, unit_chunks(job, tokenizer, unit)).result(timeout=60)
        assert report.units == 1 and unit.unit_id in completed_units(tmp_path / "out")
        batches += report.batches.batches
    stream.close()
    assert batches >= len(pending)  # no unit waited for the next: each one's rows were flushed alone


def test_a_stream_skips_a_bad_file_or_stops_at_it_keeping_the_units_before(tmp_path):
    write_corpus(tmp_path / "in", variant_texts(20), num_files=1, row_group_size=20)
    (tmp_path / "in" / "z.jsonl").write_text('{"id": 50, "text": "fine"}\n{not json\n')
    inputs = (str(tmp_path / "in"),)
    options = {**OPTIONS, "rows_per_unit": 20}

    skip = job_config(IndexOptions(inputs=inputs, output=str(tmp_path / "skip"), skip_bad_files=True, **options))
    engines: list[StreamEngine] = []
    result = run_job(skip, opened(engines))
    assert result.exit_code == 3
    assert [bad["path"].rsplit("/", 1)[1] for bad in result.metrics["bad_files"]] == ["z.jsonl"]
    assert read_embeddings(tmp_path / "skip").num_rows == 20
    bad_report = engines[0].futures[-1].result()
    assert (bad_report.units, len(bad_report.bad_files)) == (0, 1)

    fail = job_config(IndexOptions(inputs=inputs, output=str(tmp_path / "fail"), **options))
    with pytest.raises(InputError, match="z.jsonl: cannot read jsonl input"):
        run_job(fail, opened(engines))
    assert len(completed_units(tmp_path / "fail")) == 1  # the unit before the bad file is done and kept
    stopped = engines[1].futures
    assert stopped[0].result().units == 1 and isinstance(stopped[1].exception(), InputError)


def test_a_failed_stream_fails_its_open_unit_and_every_later_one(corpus, tmp_path):
    job, tokenizer, (first, second, *_) = pending_units(corpus[0], tmp_path / "out")

    def broken():  # a unit whose source fails halfway (as a device error would)
        chunks = unit_chunks(job, tokenizer, first)
        yield chunks[0]
        raise RuntimeError("lost the device")

    stream = UnitStream(job, load_engine(job.engine), "stream")
    failed = stream.submit(first.unit_id, broken())
    with pytest.raises(RuntimeError, match="lost the device"):
        failed.result(timeout=60)
    later = stream.submit(second.unit_id, unit_chunks(job, tokenizer, second))
    assert isinstance(later.exception(timeout=1), RuntimeError)
    with pytest.raises(RuntimeError, match="lost the device"):
        stream.close()
    assert completed_units(tmp_path / "out") == {}
    assert not list((tmp_path / "out").rglob("*.parquet"))  # the open unit's partial file is gone


def test_a_failed_commit_fails_its_unit_while_the_stream_waits_for_the_next(corpus, tmp_path, monkeypatch):
    job, tokenizer, (first, second, *_) = pending_units(corpus[0], tmp_path / "out")
    stream = UnitStream(job, load_engine(job.engine), "stream")
    assert stream.submit(first.unit_id, unit_chunks(job, tokenizer, first)).result(timeout=60).units == 1

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(unit_files, "mark_done", disk_full)
    failed = stream.submit(second.unit_id, unit_chunks(job, tokenizer, second))  # the last unit: none comes after
    with pytest.raises(OSError, match="No space left"):
        failed.result(timeout=30)
    with pytest.raises(OSError, match="No space left"):
        stream.close()
    done = completed_units(tmp_path / "out")
    assert set(done) == {first.unit_id}
    # the failed unit's file is gone: only the done unit's is left
    assert [path.name for path in (tmp_path / "out" / "embeddings").iterdir()] == [done[first.unit_id]["file_name"]]


def test_since_takes_an_earlier_report_from_a_later_one():
    earlier = EngineReport("d", units=2, rows=10, tokens=100, batches=BatchStats(2, 10, 100, 128),
                           graphs={"eager_runs": 1, "graph_captures": 1, "graph_replays": 0},
                           bad_files=[{"path": "a"}], main_thread_cpu_s=1.0, chunk_wait_s=0.5, input_rows=10)
    later = EngineReport("d", units=5, rows=30, tokens=250, rejected=1, batches=BatchStats(5, 30, 250, 320),
                         graphs={"eager_runs": 1, "graph_captures": 2, "graph_replays": 4},
                         bad_files=[{"path": "a"}, {"path": "b"}], main_thread_cpu_s=2.5, chunk_wait_s=0.75,
                         input_rows=30)
    share = later.since(earlier)
    assert (share.units, share.rows, share.tokens, share.rejected, share.input_rows) == (3, 20, 150, 1, 20)
    assert share.batches == BatchStats(3, 20, 150, 192) and share.bad_files == [{"path": "b"}]
    assert share.graphs == {"eager_runs": 0, "graph_captures": 1, "graph_replays": 4}
    total = earlier + share
    assert (total.units, total.rows, total.tokens, total.batches, total.graphs, total.bad_files) == \
        (later.units, later.rows, later.tokens, later.batches, later.graphs, later.bad_files)
    assert total.main_thread_cpu_s == pytest.approx(2.5) and total.chunk_wait_s == pytest.approx(0.75)
