"""`embedpipe query TEXT --index OUTPUT --rerank M -k K --top N`, run as a user runs it: the k retrieved hits
rescored by the reranker (each hit's document: its kept text), best first, and a clear error without a text column."""
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import embedpipe
from embedpipe.kernels.testing.random_model import write_random_model

pytestmark = pytest.mark.slow
QUERY = "what is a cat?"
TEXTS = ["a cat is an animal", "the weather is nice today", "cats purr", "dogs bark at night", "paris is in france",
         "a cat and a dog", "stock markets fell", "kittens are young cats"]


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cross-encoder")
    write_random_model("tiny-bert-cross-encoder", folder)
    return folder


def index_of(folder, model, *keep: str):
    (folder / "in").mkdir()
    pq.write_table(pa.table({"id": list(range(len(TEXTS))), "text": TEXTS}), folder / "in" / "docs.parquet")
    keep_args = ["--keep-columns", *keep] if keep else []
    result = run_cli("index", folder / "in", "--output", folder / "out", "--model", model, "--device", "cpu",
                     "--quiet", *keep_args)
    assert result.returncode == 0, result.stderr
    return folder / "out"


@pytest.fixture(scope="module")
def output(tmp_path_factory, tiny_model):
    return index_of(tmp_path_factory.mktemp("kept-text"), tiny_model, "text")


def test_query_rerank_orders_the_hits_by_rerank_score(output, cross_encoder):
    retrieved = json.loads(run_cli("query", QUERY, "--index", output, "-k", "6", "--device", "cpu", "--json").stdout)
    result = run_cli("query", QUERY, "--index", output, "--rerank", cross_encoder, "-k", "6", "--top", "4",
                     "--device", "cpu", "--json")
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)
    assert len(hits) == 4 and list(hits[0])[:3] == ["id", "rerank_score", "score"]
    scores = embedpipe.Reranker(str(cross_encoder), device="cpu").score(QUERY, [hit["text"] for hit in retrieved])
    expected = sorted(range(len(retrieved)), key=lambda i: -scores[i])[:4]
    assert [hit["id"] for hit in hits] == [retrieved[i]["id"] for i in expected]
    assert [hit["rerank_score"] for hit in hits] == pytest.approx([float(scores[i]) for i in expected], abs=1e-5)
    assert [hit["score"] for hit in hits] == pytest.approx([retrieved[i]["score"] for i in expected], abs=1e-5)
    assert all(hit["text"] == TEXTS[hit["id"]] for hit in hits)


def test_query_rerank_table_shows_both_scores(output, cross_encoder):
    result = run_cli("query", QUERY, "--index", output, "--rerank", cross_encoder, "-k", "3", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["rank", "rerank_score", "score", "id"] and len(lines) == 4


def test_query_rerank_without_a_kept_text_column_is_a_usage_error(tmp_path, tiny_model, cross_encoder):
    output = index_of(tmp_path, tiny_model)
    result = run_cli("query", QUERY, "--index", output, "--rerank", cross_encoder, "--device", "cpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "index with --keep-columns text" in result.stderr


def test_top_needs_rerank(output):
    result = run_cli("query", QUERY, "--index", output, "--top", "2", "--device", "cpu")
    assert result.returncode == 2 and "--top is for --rerank" in result.stderr
