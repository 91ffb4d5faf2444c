"""Pre-tokenised input: `index --token-ids-column` and `embedpipe tokenize`, against the text path."""
from __future__ import annotations

import json
import os
import signal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from support.numerics import cosine
from support.corpus import read_embeddings, variant_texts, vectors_of, write_corpus
from embedpipe.cli.main import app
from embedpipe.kernels.engine import EngineConfig, model_spec
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.index.reader import TOKENIZER_KEY
from support.processes import assert_consistent, run_fast, start_index, wait_for_units, wait_until_gone

pytestmark = pytest.mark.slow
NUM_ROWS = 600
CPU = ["--device", "cpu", "--quiet"]


def invoke(*args) -> object:
    return CliRunner().invoke(app, [*map(str, args)])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two Parquet files (id, text, source), row groups of 50, with a few bad and over-long texts."""
    folder = tmp_path_factory.mktemp("texts")
    texts = variant_texts(NUM_ROWS)
    texts[7], texts[300] = "  ", "the vector index " * 200  # a rejected row, a text cut at max_length
    write_corpus(folder / "in", texts, num_files=2, row_group_size=50)
    return folder / "in"


@pytest.fixture(scope="module")
def from_texts(corpus, tmp_path_factory):
    output = tmp_path_factory.mktemp("from-texts") / "out"
    result = invoke("index", corpus, "--output", output, "--keep-columns", "source", *CPU)
    assert result.exit_code == 0, result.stderr
    return output


def token_ids_file(path, rows: list[list[int]], ids=None, value_type=pa.int64()):
    ids = list(range(len(rows))) if ids is None else ids
    pq.write_table(pa.table({"id": ids, "token_ids": pa.array(rows, pa.list_(value_type))}), path)
    return path


def test_token_ids_give_the_embeddings_of_their_texts(corpus, from_texts, tmp_path):
    """Ids made by the model's tokenizer (int64 lists, as a user's own tokenizer writes them) embed as the texts do."""
    tokenizer = make_tokenizer(model_spec(EngineConfig()))
    table = pq.read_table(corpus).sort_by("id")
    good = [i for i, text in enumerate(table.column("text").to_pylist()) if text.strip()]
    texts = table.column("text").take(good).to_pylist()
    ids, _ = tokenizer.encode(texts)
    path = token_ids_file(tmp_path / "ids.parquet", ids, table.column("id").take(good).to_pylist())
    result = invoke("index", path, "--output", tmp_path / "out", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 0, result.stderr
    ours, theirs = read_embeddings(tmp_path / "out"), read_embeddings(from_texts)
    assert ours.column("id").equals(theirs.column("id"))
    assert cosine(vectors_of(ours), vectors_of(theirs)).min() >= 0.99999
    assert json.loads((tmp_path / "out" / "job.json").read_text())["token_ids_column"] == "token_ids"


def test_tokenize_then_index_equals_index_on_the_texts(corpus, from_texts, tmp_path):
    tokens = tmp_path / "tokens"
    result = invoke("tokenize", corpus, "--output", tokens, "--keep-columns", "source", "--workers", "2", "-q")
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((tokens / "metrics.json").read_text())
    truncated = json.loads((from_texts / "metrics.json").read_text())["truncated_texts"]
    assert (metrics["rows"], metrics["rejected_rows"], metrics["truncated_texts"]) == (NUM_ROWS - 1, 1, truncated)
    assert truncated >= 1  # the long text, at least
    assert_consistent(tokens, "tokens")
    result = invoke("index", tokens / "tokens", "--output", tmp_path / "out", "--token-ids-column", "token_ids",
                    "--keep-columns", "source", *CPU)
    assert result.exit_code == 0, result.stderr
    ours, theirs = read_embeddings(tmp_path / "out"), read_embeddings(from_texts)
    assert ours.drop(["embedding"]).equals(theirs.drop(["embedding"]))  # ids and kept columns
    assert cosine(vectors_of(ours), vectors_of(theirs)).min() >= 0.99999
    rejected = pq.read_table(tokens / "rejected.parquet")
    assert rejected.column("reason").to_pylist() == ["whitespace"]


def test_a_tokenized_corpus_is_refused_by_another_prompt_or_tokenizer(corpus, tmp_path):
    tokens = tmp_path / "tokens"
    assert invoke("tokenize", corpus, "--output", tokens, "--prompt", "query: ", "-q").exit_code == 0
    result = invoke("index", tokens / "tokens", "--output", tmp_path / "out", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 2
    assert "was tokenized with the prompt 'query: ', not this job's ''" in result.stderr
    result = invoke("index", tokens / "tokens", "--output", tmp_path / "out2", "--token-ids-column", "token_ids",
                    "--prompt", "query: ", *CPU)
    assert result.exit_code == 0, result.stderr
    other = tmp_path / "other.parquet"
    table = pq.read_table(next((tokens / "tokens").glob("*.parquet")))
    pq.write_table(table.replace_schema_metadata({TOKENIZER_KEY: b"sha256:0123456789abcdef/max_length:512"}), other)
    result = invoke("index", other, "--output", tmp_path / "out3", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 2 and "was tokenized by another tokenizer (sha256:0123456789abcdef" in result.stderr


@pytest.mark.parametrize("rows,value_type,message", [
    ([[101, 2023, 102], [101, -5, 102]], pa.int64(), "the row with id 1 hold -5, outside the model's vocabulary"),
    ([[101, 30522, 102]], pa.int64(), "the row with id 0 hold 30522, outside the model's vocabulary of 30522 ids"),
    ([[101, 102], []], pa.int32(), "the token ids of the row with id 1 are an empty list"),
    ([[101, None, 102]], pa.int64(), "the token ids of the row with id 0 hold a null"),
])
def test_bad_token_ids_are_named_errors(tmp_path, rows, value_type, message):
    path = token_ids_file(tmp_path / "bad.parquet", rows, value_type=value_type)
    result = invoke("index", path, "--output", tmp_path / "out", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 2, result.stderr
    assert f"{path}: " in result.stderr and message in result.stderr
    assert not list((tmp_path / "out" / "embeddings").glob("*.parquet"))


def test_a_token_ids_column_of_another_type_is_a_named_error(tmp_path):
    path = tmp_path / "texts.parquet"
    pq.write_table(pa.table({"id": [0], "token_ids": ["101 2023 102"]}), path)
    result = invoke("index", path, "--output", tmp_path / "out", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 2
    assert "token ids column 'token_ids' has type string, not a list of integers" in result.stderr


def test_null_token_ids_are_rejected_rows_and_long_ones_are_cut_as_texts_are(tmp_path):
    """A null list is a bad row (rejected.parquet); a sequence past max_length keeps its closing [SEP]."""
    tokenizer = make_tokenizer(model_spec(EngineConfig()))
    long_text = "the vector index " * 200
    (cut,), _ = tokenizer.encode([long_text])
    untruncated = Tokenizer.from_file(tokenizer.tokenizer_file)
    untruncated.no_truncation()
    whole = untruncated.encode(long_text).ids  # [CLS] 600 ids [SEP]
    assert len(whole) > len(cut) == tokenizer.max_length
    path = token_ids_file(tmp_path / "ids.parquet", [whole, None, cut], ids=["long", "null", "cut"])
    result = invoke("index", path, "--output", tmp_path / "out", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 0, result.stderr
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["rows"], metrics["rejected_rows"], metrics["truncated_texts"]) == (2, 1, 1)
    table = read_embeddings(tmp_path / "out")
    assert table.column("id").to_pylist() == ["cut", "long"]
    vectors = vectors_of(table)
    assert cosine(vectors[0], vectors[1]) >= 0.99999
    assert pq.read_table(tmp_path / "out" / "rejected.parquet").column("reason").to_pylist() == ["null"]


def test_a_killed_tokenize_job_resumes_to_the_uninterrupted_output(tmp_path):
    write_corpus(tmp_path / "in", variant_texts(6000), num_files=2, row_group_size=100)
    options = ["--rows-per-unit", "100", "--workers", "1", "--quiet"]
    reference = tmp_path / "reference"
    assert run_fast(tmp_path / "in", "--output", reference, *options, command="tokenize").returncode == 0
    output = tmp_path / "out"
    process = start_index(tmp_path / "in", "--output", output, *options, command="tokenize")
    wait_for_units(process, output, 3)
    descendants = [child.pid for child in process.children(recursive=True)]
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert wait_until_gone(descendants), "orphan processes"
    done = completed_units(output, "tokens")
    assert 3 <= len(done) < 60
    for path in (output / "tokens").glob("[!.]*"):  # whatever stands at a final name is complete (a footer)
        pq.read_metadata(path)  # (one renamed in place just before its record was written is redone)
    result = run_fast(tmp_path / "in", "--output", output, *options, command="tokenize")
    assert result.returncode == 0, result.stderr
    assert assert_consistent(output, "tokens").keys() == assert_consistent(reference, "tokens").keys()
    for name in os.listdir(reference / "tokens"):
        assert pq.read_table(output / "tokens" / name).equals(pq.read_table(reference / "tokens" / name))


def test_tokenize_shards_cover_the_job_once(corpus, tmp_path):
    for shard in range(2):
        result = invoke("tokenize", corpus, "--output", tmp_path / f"shard{shard}", "--shard-index", shard,
                        "--num-shards", 2, "-q")
        assert result.exit_code == 0, result.stderr
    ids = [i for shard in range(2)
           for i in pq.read_table(tmp_path / f"shard{shard}" / "tokens").column("id").to_pylist()]
    assert sorted(ids) == [1000 + row for row in range(NUM_ROWS) if row != 7]  # row 7 is rejected


def test_verify_checks_a_token_ids_job_against_its_inputs(corpus, tmp_path):
    tokens = tmp_path / "tokens"
    assert invoke("tokenize", corpus, "--output", tokens, "-q").exit_code == 0
    result = invoke("index", tokens / "tokens", "--output", tmp_path / "out", "--token-ids-column", "token_ids", *CPU)
    assert result.exit_code == 0, result.stderr
    result = invoke("verify", tmp_path / "out", "--input", tokens / "tokens")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"input: each of the {NUM_ROWS - 1:,} input rows is in the output or rejected, once" in result.stdout
