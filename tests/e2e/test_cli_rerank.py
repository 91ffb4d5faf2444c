"""`embedpipe rerank`, run as a user runs it, and embedpipe.Reranker: the same scores, best first."""
import json
import subprocess
import sys

import pytest

import embedpipe
from embedpipe.kernels.testing.random_model import write_random_model

DOCUMENTS = ["a cat is an animal", "the weather is nice today", "cats purr", "dogs bark at night", "paris is in france"]


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cross-encoder")
    write_random_model("tiny-bert-cross-encoder", folder)
    return folder


def test_rerank_prints_sorted_json_lines_equal_to_the_python_api(cross_encoder):
    result = run_cli("rerank", "--model", str(cross_encoder), "--query", "what is a cat?", *DOCUMENTS,
                     "--device", "cpu")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(line["index"] for line in lines) == list(range(len(DOCUMENTS)))
    assert [line["score"] for line in lines] == sorted((line["score"] for line in lines), reverse=True)
    reranker = embedpipe.Reranker(str(cross_encoder), device="cpu")
    assert lines == reranker.rerank("what is a cat?", DOCUMENTS)
    scores = reranker.score("what is a cat?", DOCUMENTS)
    assert [line["score"] for line in lines] == [float(scores[line["index"]]) for line in lines]
    assert reranker.rerank("what is a cat?", DOCUMENTS, top_n=2) == lines[:2]


def test_rerank_top_and_truncation_count(cross_encoder):
    result = run_cli("rerank", "-m", str(cross_encoder), "-q", "cat", "--top", "1", "--max-length", "16",
                     "word " * 50, "cats", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and "1 of 2 documents were cut" in result.stderr


@pytest.mark.parametrize("args,message", [
    (("--no-truncate", "--max-length", "16", "word " * 50), "document 0: with the query, it is longer"),
    (("",), "document 0 is empty"),
])
def test_rerank_errors_are_one_line_and_exit_2(cross_encoder, args, message):
    result = run_cli("rerank", "-m", str(cross_encoder), "-q", "cat", *args, "--device", "cpu")
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_rerank_with_an_embedding_model_says_it_is_not_a_reranker(tiny_model):
    result = run_cli("rerank", "-m", str(tiny_model), "-q", "cat", "a doc", "--device", "cpu")
    assert result.returncode == 2 and "is not a reranker" in result.stderr
    with pytest.raises(embedpipe.UserError, match="is not a reranker"):
        embedpipe.Reranker(str(tiny_model), device="cpu")
