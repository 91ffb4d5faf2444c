"""`index --chunk-tokens` end to end: windows as rows, equal to `embed` of their texts, verify, search, resume."""
from __future__ import annotations

import json
import shutil
import signal

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import embedpipe
from support.chunked_docs import long_docs, sorted_windows, windows_of, write_docs
from support.corpus import assert_same_output, run_index, vectors_of
from support.numerics import cosine
from support.processes import assert_consistent, num_records, run_fast, start_index, wait_for_units
from embedpipe.cli.main import app
from embedpipe.pipeline.serve.app import local_server
from embedpipe.pipeline.serve.config import ServeConfig
from embedpipe.pipeline.serve.launch import load_index
from support.serve_client import InProcessServer, embed, vectors

pytestmark = pytest.mark.slow
WINDOWS = ["--chunk-tokens", "48", "--chunk-overlap", "8", "--chunk-on", "sentence"]
OPTIONS = [*WINDOWS, "--keep-columns", "text,title", "--rows-per-unit", "5", "--device", "cpu", "--quiet"]


def run_cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(input folder, docs, output) of a --chunk-tokens job run to its end with MiniLM and one tokenizer worker."""
    folder = tmp_path_factory.mktemp("chunking")
    docs = long_docs(24)
    inputs = write_docs(folder / "in", docs, row_group_size=5)
    result = run_index(inputs, "--output", folder / "out", *OPTIONS, "--workers", "1")
    assert result.returncode == 0, result.stderr
    return inputs, docs, folder / "out"


def test_each_window_is_a_row_equal_to_embed_of_its_text(job, tmp_path):
    inputs, docs, output = job
    table = windows_of(output)
    assert table.column_names == ["id", "embedding", "chunk", "char_start", "char_end", "text", "title"]
    assert [table.schema.field(name).type for name in ("chunk", "char_start", "char_end")] == [pa.int32(), pa.int64(),
                                                                                             pa.int64()]
    rows = table.drop(["embedding"]).to_pylist()
    for row in rows:  # a kept text column holds the window's text
        assert row["text"] == docs[row["id"] - 100][row["char_start"]:row["char_end"]]
        assert row["title"] == f"title {row['id'] - 100}"
    counts = pc.value_counts(table.column("id")).field("counts").to_pylist()
    assert max(counts) >= 4 and min(counts) == 1 and len(counts) == len(docs) - 1  # the empty text is rejected
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["input_rows"], metrics["chunks"], metrics["rows"]) == (len(docs) - 1, len(rows), len(rows))
    assert (metrics["truncated_texts"], metrics["rejected_rows"], metrics["index"]["num_rows"]) == (0, 1, len(rows))
    assert metrics["index"]["duplicate_ids"] == 0  # windows of one text are no duplicate ids
    settings = json.loads((output / "job.json").read_text())
    assert (settings["chunk_tokens"], settings["chunk_overlap"], settings["chunk_on"]) == (48, 8, "sentence")
    window_texts = tmp_path / "windows.jsonl"
    window_texts.write_text("".join(json.dumps({"text": row["text"]}) + "\n" for row in rows))
    embedded = run_cli("embed", "--input-file", window_texts, "--device", "cpu")
    assert embedded.exit_code == 0, embedded.output
    expected = np.array([json.loads(line)["embedding"] for line in embedded.stdout.splitlines()])
    assert cosine(vectors_of(table), expected).min() >= 0.9999


def test_embed_and_the_python_api_cut_the_same_windows(job, tmp_path):
    inputs, docs, output = job
    stored = sorted_windows(output).filter(pc.less(pc.field("id"), 103))
    result = run_cli("embed", *docs[:3], *WINDOWS, "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["input"] + 100, line["chunk"], line["char_start"], line["char_end"], line["text"])
            for line in lines] \
        == [(r["id"], r["chunk"], r["char_start"], r["char_end"], r["text"])
            for r in stored.drop(["embedding"]).to_pylist()]
    assert cosine(np.array([line["embedding"] for line in lines]), vectors_of(stored)).min() >= 0.9999
    windows = embedpipe.Embedder(device="cpu").encode_windows(docs[:3], 48, chunk_overlap=8, chunk_on="sentence")
    assert windows.text_index.tolist() == [line["input"] for line in lines]
    assert windows.texts == [line["text"] for line in lines]
    assert windows.char_start.tolist() == [line["char_start"] for line in lines] and len(windows) == len(lines)
    assert cosine(windows.vectors, vectors_of(stored)).min() >= 0.99999
    api = embedpipe.index(inputs, tmp_path / "api", device="cpu", keep_columns="text,title", rows_per_unit=5,
                          chunk_tokens=48, chunk_overlap=8, chunk_on="sentence")
    assert api.metrics["chunks"] == windows_of(output).num_rows
    assert_same_output(tmp_path / "api", output)


def damage(output, change) -> None:
    """Applies change(table) -> table to the unit file holding id 100's windows, and records its row count."""
    for record_path in (output / "manifest").glob("[!.]*.json"):
        record = json.loads(record_path.read_text())
        path = output / "embeddings" / record["file_name"]
        table = pq.read_table(path)
        if 100 in table.column("id").to_pylist():
            table = change(table)
            pq.write_table(table, path)
            record_path.write_text(json.dumps({**record, "num_rows": table.num_rows}))
            return


def without_row(which):
    def change(table):
        rows = np.flatnonzero(pc.equal(table.column("id"), 100).to_numpy(zero_copy_only=False))
        keep = np.ones(table.num_rows, np.bool_)
        keep[rows[which]] = False
        return table.filter(pa.array(keep))
    return change


@pytest.mark.parametrize("change, message", [
    (without_row(1), "a window is missing or repeated"),
    (without_row(-1), "its last window does not end at the text's end"),
    (lambda table: pa.concat_tables([table.slice(0, 2), table.slice(1)]), "a window is missing or repeated"),
    (lambda table: table.slice(1), "its first window in the file is not chunk 0"),
], ids=["a middle window lost", "the last window lost", "a window twice", "the first window lost"])
def test_verify_passes_and_catches_a_missing_window(job, tmp_path, change, message):
    inputs, docs, output = job
    good = run_cli("verify", output, "--input", inputs)
    assert good.exit_code == 0, good.output
    assert "ok    input: each of the 24 input rows has its windows in the output once, covering its text" in good.stdout
    assert "warn" not in good.stdout
    damaged = tmp_path / "out"
    shutil.copytree(output, damaged)
    damage(damaged, change)
    result = run_cli("verify", damaged, "--input", inputs)
    assert result.exit_code == 1, result.output
    assert "FAIL  input: 1 units' rows differ from their windows" in result.stdout
    assert f"the row with id '100': {message}" in result.stdout


def test_query_and_search_hits_name_the_window(job, minilm):
    inputs, docs, output = job
    query = docs[8][:200]
    result = run_cli("query", query, "--index", output, "--device", "cpu", "-k", "3", "--json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert list(hits[0])[:2] == ["id", "score"] and {"chunk", "char_start", "char_end"} <= set(hits[0])
    assert hits[0]["id"] == 108 and hits[0]["chunk"] == 0
    assert all(hit["text"] == docs[hit["id"] - 100][hit["char_start"]:hit["char_end"]] for hit in hits)
    table = run_cli("query", query, "--index", output, "--device", "cpu", "-k", "1")
    assert table.stdout.splitlines()[0].split()[:6] == ["rank", "score", "id", "chunk", "char_start", "char_end"]
    server = local_server(ServeConfig(engine=minilm.config), minilm, load_index(output, minilm))
    with InProcessServer(server) as live:
        found = httpx.post(live.url + "/v1/search", json={"query": query, "k": 3}, timeout=60).json()["data"][0]["hits"]
        assert [(h["id"], h["chunk"], h["char_start"], h["char_end"]) for h in found] == \
            [(h["id"], h["chunk"], h["char_start"], h["char_end"]) for h in hits]
        long_text = docs[0] * 20  # /v1/embeddings still cuts a long text to one vector, as before
        one = vectors(embed(live.url, input=long_text))
        assert one.shape == (1, 384)
        cut = run_cli("embed", long_text, "--device", "cpu")
        assert cosine(one, np.array([json.loads(cut.stdout)["embedding"]])).min() >= 0.9999


def test_other_windows_on_the_same_output_are_refused(job):
    inputs, docs, output = job
    options = [*OPTIONS]
    options[1] = "32"
    result = run_index(inputs, "--output", output, *options)
    assert result.returncode == 2 and "chunk_tokens: 48 (stored) != 32 (now)" in result.stderr


@pytest.mark.parametrize("args, message", [
    (["--chunk-overlap", "4"], "--chunk-overlap, --chunk-on and --late-chunking shape the windows of --chunk-tokens; "
                               "give it too"),
    (["--chunk-tokens", "0"], "--chunk-tokens must be a positive integer, not 0"),
    (["--chunk-tokens", "300"], "--chunk-tokens 300 is more than the max length 256 (the model's max_seq_length, or "
                                "--max-length)"),
    (["--chunk-tokens", "64", "--max-length", "32"], "--chunk-tokens 64 is more than the max length 32"),
    (["--chunk-tokens", "3", "--chunk-overlap", "1"], "--chunk-tokens 3 leaves 1 tokens of text per window"),
    (["--chunk-tokens", "64", "--keep-columns", "chunk"], "column 'chunk': with --chunk-tokens, chunk, char_start, "
                                                          "char_end name each window's columns"),
])
def test_chunk_options_that_make_no_windows_are_one_line_usage_errors(job, tmp_path, args, message):
    inputs, _, _ = job
    for command in (["index", inputs, "--output", tmp_path / "out"], ["embed", "a text"]):
        if command[0] == "embed" and "--keep-columns" in args:
            continue
        result = run_cli(*command, *args, "--device", "cpu")
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith("embedpipe: error: ") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # nothing was written


def test_tokenize_refuses_windows(job, tmp_path):
    inputs, _, _ = job
    (tmp_path / "job.toml").write_text("chunk-tokens = 64\n")
    result = run_cli("tokenize", inputs, "--output", tmp_path / "tok", "--config", tmp_path / "job.toml")
    assert result.exit_code == 2 and "--chunk-tokens is an option of index" in result.stderr


@pytest.mark.parametrize("late", [[], ["--late-chunking", "--max-length", "128"]], ids=["windows", "late"])
def test_a_killed_chunked_job_resumes_to_the_uninterrupted_output(tmp_path, tiny_model, late):
    inputs = write_docs(tmp_path / "in", long_docs(400, seed=1), row_group_size=10)
    options = ["--model", tiny_model, "--chunk-tokens", "40", "--chunk-overlap", "10", "--keep-columns", "text",
               "--rows-per-unit", "10", "--device", "cpu", "--quiet", *late]
    reference = run_fast(inputs, "--output", tmp_path / "whole", *options)
    assert reference.returncode == 0, reference.stderr
    process = start_index(inputs, "--output", tmp_path / "out", *options, "--workers", "1")
    wait_for_units(process, tmp_path / "out", 3)
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert 3 <= num_records(tmp_path / "out") < 40
    resumed = run_fast(inputs, "--output", tmp_path / "out", *options)
    assert resumed.returncode == 0, resumed.stderr
    ours, whole = sorted_windows(tmp_path / "out"), sorted_windows(tmp_path / "whole")
    assert ours.drop(["embedding"]).equals(whole.drop(["embedding"]))  # every window once
    assert cosine(vectors_of(ours), vectors_of(whole)).min() >= 0.99999
    assert_consistent(tmp_path / "out")
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["output_rows"] == whole.num_rows and metrics["chunks"] < whole.num_rows
    verified = run_cli("verify", tmp_path / "out", "--input", inputs)
    assert verified.exit_code == 0, verified.output


def test_an_ivf_index_may_have_more_clusters_than_input_rows_when_their_windows_suffice(tmp_path, tiny_model):
    """The up-front IVF check counts input rows; with --chunk-tokens the index holds windows, known only once cut."""
    docs = long_docs(12, seed=5)
    inputs = write_docs(tmp_path / "in", docs, row_group_size=12)
    result = run_index(inputs, "--output", tmp_path / "out", "--model", tiny_model, "--chunk-tokens", "16",
                       "--index-factory", "IVF16,Flat", "--device", "cpu", "--quiet")
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["input_rows"] < 16 <= metrics["index"]["num_rows"] == metrics["chunks"]
