"""`index --late-chunking` end to end: each window pooled from one pass over its text (or over a run of whole
windows, when the text is longer than the max length), equal to transformers' full-document forward."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.compute as pc
import pytest
import transformers
from typer.testing import CliRunner

from support.chunked_docs import long_docs, sorted_windows, write_docs
from support.corpus import run_index, vectors_of
from support.late_chunking import reference_span_embeddings
from support.numerics import cosine
from embedpipe.cli.main import app
from embedpipe.kernels.models.model_folder import builtin_models
from embedpipe.pipeline.text.chunking import ChunkConfig, WindowCutter

pytestmark = pytest.mark.slow
MAX_LENGTH, CHUNK, OVERLAP = 96, 24, 6  # most texts run as 2-5 documents of whole windows
WINDOWS = ["--chunk-tokens", CHUNK, "--chunk-overlap", OVERLAP, "--max-length", MAX_LENGTH]
OPTIONS = [*WINDOWS, "--keep-columns", "text", "--rows-per-unit", "4", "--device", "cpu", "--quiet", "--workers", "1"]


def index(inputs, output, *more):
    result = run_index(inputs, "--output", output, *map(str, OPTIONS), *map(str, more))
    assert result.returncode == 0, result.stderr
    return sorted_windows(output)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """(docs, late-chunked windows, the same windows embedded alone, late with small batches)."""
    folder = tmp_path_factory.mktemp("late")
    docs = long_docs(12, seed=3)
    inputs = write_docs(folder / "in", docs, row_group_size=4)
    late = index(inputs, folder / "late", "--late-chunking")
    alone = index(inputs, folder / "alone")
    small_batches = index(inputs, folder / "small", "--late-chunking", "--max-batch-tokens", "256",
                          "--max-batch-seqs", "3")
    return docs, inputs, folder / "late", late, alone, small_batches


def reference_windows(docs: list[str], ids: list[int]) -> np.ndarray:
    """Each text's windows (in id order): the text's tokens in documents of whole windows (greedily, at most
    MAX_LENGTH tokens with [CLS] and [SEP]), each document run once through transformers in float32, each
    window the normalised mean of its tokens' hidden states there."""
    folder = builtin_models()["minilm"]
    model = transformers.AutoModel.from_pretrained(folder).eval()
    cutter = WindowCutter(str(folder / "tokenizer.json"), MAX_LENGTH, "", ChunkConfig(CHUNK, OVERLAP))
    rows = []
    for doc_id in ids:
        w = cutter.windows([docs[doc_id - 100]])[0]
        first = 0
        while first < len(w):
            last = first
            while last + 1 < len(w) and w.token_end[last + 1] - w.token_start[first] <= MAX_LENGTH - 2:
                last += 1
            base = int(w.token_start[first])
            document = [101, *w.content_ids[base:int(w.token_end[last])].tolist(), 102]
            spans = [(int(w.token_start[k]) - base + 1, int(w.token_end[k]) - base + 1) for k in range(first, last + 1)]
            if len(document) == 2:  # a text of no tokens (control characters): its window pools [CLS] [SEP]
                spans = [(0, 2)]
            rows.append(reference_span_embeddings(model, document, spans, "mean", True).numpy())
            first = last + 1
    return np.concatenate(rows)


def test_windows_equal_transformers_full_document_forward_then_span_pooling(jobs):
    docs, _, _, late, _, _ = jobs
    ids = sorted(set(late.column("id").to_pylist()))
    assert cosine(vectors_of(late), reference_windows(docs, ids)).min() >= 0.9999
    per_text = pc.value_counts(late.column("id")).field("counts").to_numpy()
    assert per_text.max() * (CHUNK - 2 - OVERLAP) > MAX_LENGTH  # some texts ran as several documents


def test_windows_and_offsets_are_those_of_chunk_tokens(jobs):
    _, _, _, late, alone, _ = jobs
    assert late.drop(["embedding"]).equals(alone.drop(["embedding"]))
    # pooled from their whole document, the windows are not the windows embedded alone
    assert np.median(cosine(vectors_of(late), vectors_of(alone))) < 0.99


def test_vectors_do_not_depend_on_batch_packing(jobs):
    _, _, _, late, _, small_batches = jobs
    assert late.drop(["embedding"]).equals(small_batches.drop(["embedding"]))
    assert np.abs(vectors_of(late) - vectors_of(small_batches)).max() < 1e-5


def test_verify_passes_and_job_json_records_late_chunking(jobs):
    _, inputs, output, late, _, _ = jobs
    assert json.loads((output / "job.json").read_text())["late_chunking"] is True
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["chunks"], metrics["truncated_texts"]) == (late.num_rows, 0)
    verified = CliRunner().invoke(app, ["verify", str(output), "--input", str(inputs)])
    assert verified.exit_code == 0, verified.output


def test_embed_late_chunking_equals_the_index_rows(jobs):
    docs, _, _, late, _, _ = jobs
    first = late.filter(pc.equal(late.column("id"), late.column("id")[0]))
    result = CliRunner().invoke(app, ["embed", docs[first.column("id")[0].as_py() - 100], "--device", "cpu",
                                      "--late-chunking", *map(str, WINDOWS)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["char_start"] for line in lines] == first.column("char_start").to_pylist()
    assert cosine(np.array([line["embedding"] for line in lines]), vectors_of(first)).min() >= 0.99999


def test_a_cls_pooling_model_is_a_one_line_usage_error(tmp_path):
    from embedpipe.kernels.testing.random_model import write_random_model
    write_random_model("tiny-xlm-roberta", tmp_path / "cls-model")
    inputs = write_docs(tmp_path / "in", long_docs(4), row_group_size=4)
    result = run_index(inputs, "--output", tmp_path / "out", "--model", tmp_path / "cls-model", "--chunk-tokens",
                       "32", "--late-chunking", "--device", "cpu", "--quiet")
    assert result.returncode == 2
    assert "late chunking needs mean or last-token pooling" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
