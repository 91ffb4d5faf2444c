"""Out of device memory: the batch runs as halves, down to single texts, with the unsplit run's results;
a text that does not fit alone fails the job with a message naming its row. Faked on the CPU."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.numerics import cosine
from support.corpus import read_embeddings, variant_texts, vectors_of, write_corpus
from support.engines import OutOfMemoryAbove
from embedpipe.cli.main import app
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.pipeline.index import job
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.batching.oom_split import SplitOnOutOfMemory, TextTooLargeForDevice


@pytest.fixture(scope="module")
def engine(tiny_model):
    return Engine(EngineConfig(model=str(tiny_model), device="cpu"))


@pytest.mark.parametrize("at", ["step", "result"])
def test_a_batch_that_runs_out_of_memory_is_split_down_to_what_fits(engine, at):
    sequences = make_tokenizer(engine).encode(variant_texts(48))[0]
    batch = pack(sequences, BucketPolicy(), tags=list(range(48)))
    device = OutOfMemoryAbove(engine, max_tokens=256, at=at)
    split = SplitOnOutOfMemory(device, BucketPolicy())
    vectors = split.result(batch, split.step(batch))
    assert device.num_failed >= 3 and split.num_splits == device.num_failed
    assert vectors.shape == (48, engine.output.width)
    assert cosine(vectors, engine.step(batch).result()).min() >= 0.99999


def test_a_text_that_does_not_fit_alone_is_named(engine):
    batch = pack([[101, 2000, 102], [101] + [2000] * 100 + [102]], BucketPolicy(), tags=["short", "long"])
    split = SplitOnOutOfMemory(OutOfMemoryAbove(engine, max_tokens=64), BucketPolicy(), describe=lambda tag: tag)
    with pytest.raises(TextTooLargeForDevice, match=r"single text of 102 tokens \(long\), in a batch of its own"):
        split.result(batch, split.step(batch))


def index_with(monkeypatch, max_tokens: int, *args):
    """`embedpipe index` in this process, on an engine that runs out of memory above max_tokens."""
    monkeypatch.setattr(job, "Engine", lambda config: OutOfMemoryAbove(Engine(config), max_tokens))
    return CliRunner().invoke(app, ["index", *map(str, args), "--device", "cpu", "--quiet"])


def test_the_job_splits_batches_and_writes_what_an_unsplit_run_writes(tmp_path, tiny_model, monkeypatch):
    write_corpus(tmp_path / "in", variant_texts(120), num_files=2, row_group_size=30)
    common = [tmp_path / "in", "--model", tiny_model, "--max-batch-tokens", "2048"]
    assert CliRunner().invoke(app, ["index", *map(str, common), "--output", str(tmp_path / "plain"),
                                    "--device", "cpu", "--quiet"]).exit_code == 0
    result = index_with(monkeypatch, 512, *common, "--output", tmp_path / "split")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "split" / "metrics.json").read_text())["out_of_memory_splits"] > 0
    plain, split = read_embeddings(tmp_path / "plain"), read_embeddings(tmp_path / "split")
    assert split.column("id").equals(plain.column("id"))
    assert cosine(vectors_of(split), vectors_of(plain)).min() >= 0.99999


def test_a_text_too_large_for_the_device_fails_the_job_naming_its_row(tmp_path, tiny_model, monkeypatch):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["short", "texts", "here"]}), tmp_path / "in" / "a.parquet")
    pq.write_table(pa.table({"id": [4, 5, 6, 7], "text": ["more", "fine", "texts", "word " * 100]}),
                   tmp_path / "in" / "b.parquet")
    # batches of 3 texts: a.parquet's unit is written once the next batch runs, before the long text's batch
    result = index_with(monkeypatch, 64, tmp_path / "in", "--model", tiny_model, "--output", tmp_path / "out",
                        "--max-batch-seqs", "3")
    assert result.exit_code == 1, result.output
    assert "ran out of memory on a single text of 102 tokens (the row with id 7 of" in result.stderr
    assert "b.parquet" in result.stderr and "Traceback" not in result.output
    assert read_embeddings(tmp_path / "out").column("id").to_pylist() == [1, 2, 3]  # a.parquet's unit is kept
    assert np.isfinite(vectors_of(read_embeddings(tmp_path / "out"))).all()
