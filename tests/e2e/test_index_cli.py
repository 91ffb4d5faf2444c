"""`embedpipe index` end to end as a user runs it: a few thousand rows, parity, the index, SIGKILL and resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from support.numerics import cosine
from support.corpus import index_command, read_embeddings, run_index, variant_texts, vectors_of, write_corpus
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.output.faiss_index import SearchIndex

pytestmark = pytest.mark.slow
NUM_ROWS = 2400
KILL_OPTIONS = ["--device", "cpu", "--rows-per-unit", "50", "--max-batch-tokens", "2048", "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """4 Parquet files of 600 rows in row groups of 50; ids 1000.. in row order; some texts repeat."""
    folder = tmp_path_factory.mktemp("corpus")
    texts = variant_texts(NUM_ROWS)
    return folder, write_corpus(folder / "in", texts, num_files=4, row_group_size=50), texts


@pytest.fixture(scope="module")
def full_run(corpus):
    folder, _, _ = corpus
    result = run_index(folder / "in", "--output", folder / "out", "--device", "cpu", "--rows-per-unit", "200",
                       "--keep-columns", "source", "--workers", "1")
    assert result.returncode == 0, result.stderr
    return folder / "out", result


def test_every_row_once_equal_to_the_engine(corpus, full_run, minilm):
    _, _, texts = corpus
    output, result = full_run
    table = read_embeddings(output)
    assert table.column("id").to_pylist() == list(range(1000, 1000 + NUM_ROWS))
    assert table.column("source").to_pylist()[::600] == ["part-0", "part-1", "part-2", "part-3"]
    expected = embed_texts(minilm, make_tokenizer(minilm), texts)
    assert cosine(vectors_of(table), expected).min() >= 0.9999
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["rows"], metrics["rejected_rows"], metrics["units"]["done"]) == (NUM_ROWS, 0, 12)
    assert metrics["truncated_texts"] > 0 and 0 <= metrics["padding_waste"] < 0.2
    assert metrics["tokens_per_s"] > 0 and metrics["index"]["num_rows"] == NUM_ROWS
    assert "embedded 2,400 rows" in result.stderr  # a log line, not a bar: stderr is not a terminal


def test_each_row_is_its_own_nearest_neighbour(corpus, full_run, minilm):
    _, _, texts = corpus
    output, _ = full_run
    table = read_embeddings(output)
    token_ids = [tuple(ids) for ids in make_tokenizer(minilm).encode(texts)[0]]
    unique_rows = [row for row, ids in enumerate(token_ids) if token_ids.count(ids) == 1]  # after truncation
    sample = np.random.default_rng(0).choice(unique_rows, size=200, replace=False)
    index = SearchIndex.load(output)
    assert index.meta["model"] == "minilm" and index.meta["metric"] == "inner_product"
    hits = index.search(vectors_of(table)[sample], k=1)
    assert [h[0]["id"] for h in hits] == (sample + 1000).tolist()
    assert min(h[0]["score"] for h in hits) > 0.999


def kill_after(args, output, num_done):
    """Starts `index`, SIGKILLs it once `num_done` units are recorded; returns how many were."""
    process = subprocess.Popen(index_command(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    manifest = output / "manifest"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if manifest.is_dir() and len([p for p in os.listdir(manifest) if not p.startswith(".")]) >= num_done:
            break
        time.sleep(0.02)
    assert process.poll() is None, f"index ended before {num_done} units were done: {process.stderr.read()}"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return len(os.listdir(manifest))


def test_killed_runs_resume_to_the_uninterrupted_output(corpus, full_run, tmp_path):
    _, paths, _ = corpus
    output = tmp_path / "out"
    args = [*paths[:2], "--output", output, "--keep-columns", "source", *KILL_OPTIONS]
    first = kill_after(args, output, 1)
    second = kill_after(args, output, 3)
    assert 1 <= first <= second < 24
    result = run_index(*args)
    assert result.returncode == 0, result.stderr
    resumed, reference = read_embeddings(output), read_embeddings(full_run[0])[:1200]
    assert resumed.column("id").equals(reference.column("id"))  # exactly the input ids, each once
    assert resumed.column("source").equals(reference.column("source"))
    assert cosine(vectors_of(resumed), vectors_of(reference)).min() >= 0.9999
    assert not [p for p in os.listdir(output / "embeddings") if p.startswith(".")], "temporary files left"
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["units"]["done"] == 24 and metrics["output_rows"] == 1200 and metrics["rows"] < 1200


def test_a_killed_jsonl_job_resumes_mid_file_to_the_uninterrupted_output(tmp_path):
    """A large JSONL file is cut into byte ranges: the resume redoes only the ranges not done."""
    texts = variant_texts(600)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps({"id": 5000 + i, "text": t}) + "\n"
                                                     for i, t in enumerate(texts)))
    options = ["--device", "cpu", "--rows-per-unit", "5", "--max-batch-tokens", "2048", "--workers", "1", "--quiet"]
    reference = run_index(tmp_path / "in", "--output", tmp_path / "whole", *options)
    assert reference.returncode == 0, reference.stderr
    num_units = len(json.loads((tmp_path / "whole" / "units.json").read_text())["units"])
    assert num_units >= 8
    args = [tmp_path / "in", "--output", tmp_path / "out", *options]
    done_at_kill = kill_after(args, tmp_path / "out", 3)
    assert 3 <= done_at_kill < num_units
    result = run_index(*args)
    assert result.returncode == 0, result.stderr
    resumed, whole = read_embeddings(tmp_path / "out"), read_embeddings(tmp_path / "whole")
    assert resumed.column("id").to_pylist() == whole.column("id").to_pylist() == list(range(5000, 5600))
    assert cosine(vectors_of(resumed), vectors_of(whole)).min() >= 0.9999
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["rows"] < 600 and metrics["output_rows"] == 600
