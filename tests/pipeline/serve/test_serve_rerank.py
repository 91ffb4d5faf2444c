"""POST /v1/rerank of `embedpipe serve --rerank-model M`, in a subprocess over real HTTP on loopback: the scores of
`embedpipe rerank`, top_n and return_documents, the error shapes, and the reranker in /health and /v1/models."""
import json
import subprocess
import sys
from types import SimpleNamespace

import httpx
import pytest

from embedpipe.kernels.testing.random_model import write_random_model
from support.serve_client import ServerProcess, metric

pytestmark = pytest.mark.slow
MAX_DOCUMENTS = 8  # --max-inputs: documents a request
MAX_LENGTH = 512  # the tiny cross-encoder's max_seq_length
QUERY = "what is a cat?"
DOCUMENTS = ["a cat is an animal", "the weather is nice today", "cats purr", "dogs bark at night",
             "paris is in france", "a cat and a dog"]


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cross-encoder")
    write_random_model("tiny-bert-cross-encoder", folder)
    return folder


@pytest.fixture(scope="module", params=[1, 2], ids=["in-engine-process", "2-http-processes"])
def served(request, tmp_path_factory, tiny_model, cross_encoder):
    folder = tmp_path_factory.mktemp("serve-rerank")
    server = ServerProcess(folder / "server.log", "--model", str(tiny_model), "--rerank-model", str(cross_encoder),
                           "--max-inputs", str(MAX_DOCUMENTS), "--http-workers", str(request.param))
    yield SimpleNamespace(url=server.url, reranker=str(cross_encoder), embedder=str(tiny_model))
    assert server.terminate() == 0, (folder / "server.log").read_text()


def rerank(url: str, **payload) -> httpx.Response:
    return httpx.post(url + "/v1/rerank", json=payload, timeout=120)


def cli_rerank(model, query: str, documents: list[str]) -> list[dict]:
    """`embedpipe rerank`'s lines {"index", "score"}, best first."""
    result = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "rerank", "-m", str(model), "-q", query,
                             *documents, "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_rerank_equals_the_cli_in_order_and_score(served):
    response = rerank(served.url, model=served.reranker, query=QUERY, documents=DOCUMENTS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == served.reranker and set(body) == {"model", "results", "usage"}
    expected = cli_rerank(served.reranker, QUERY, DOCUMENTS)
    assert [r["index"] for r in body["results"]] == [line["index"] for line in expected]
    assert all(abs(r["relevance_score"] - line["score"]) < 1e-5 for r, line in zip(body["results"], expected))
    assert all("document" not in r for r in body["results"])  # return_documents defaults to false
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    assert body["usage"]["truncated_documents"] == 0
    assert int(response.headers["x-compute-tokens"]) == body["usage"]["total_tokens"]


def test_top_n_return_documents_and_jina_style_documents(served):
    full = rerank(served.url, query=QUERY, documents=DOCUMENTS).json()["results"]
    top = rerank(served.url, query=QUERY, documents=[{"text": d} for d in DOCUMENTS], top_n=2,
                 return_documents=True).json()
    assert top["model"] == served.reranker  # no model asked for: the reranker's name
    assert [r["index"] for r in top["results"]] == [r["index"] for r in full[:2]]
    assert [r["document"] for r in top["results"]] == [{"text": DOCUMENTS[r["index"]]} for r in full[:2]]
    assert len(rerank(served.url, query=QUERY, documents=DOCUMENTS, top_n=100).json()["results"]) == len(DOCUMENTS)


def test_truncation_is_counted_or_refused(served):
    long = "word " * (2 * MAX_LENGTH)
    cut = rerank(served.url, query=QUERY, documents=[long, "cats purr"])
    assert cut.status_code == 200 and cut.json()["usage"]["truncated_documents"] == 1, cut.text
    refused = rerank(served.url, query=QUERY, documents=[long, "cats purr"], truncate=False)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "documents" and error["type"] == "invalid_request_error" and error["code"] == 400
    assert error["message"].startswith(f"document 0: with the query, it is longer than the model's {MAX_LENGTH}")


@pytest.mark.parametrize("payload,param,message", [
    ({"documents": ["a"]}, "query", "query is required"),
    ({"query": "", "documents": ["a"]}, "query", "query is required"),
    ({"query": QUERY, "documents": []}, "documents", "documents is required"),
    ({"query": QUERY, "documents": ["a", ""]}, "documents", "documents[1] is an empty string"),
    ({"query": QUERY, "documents": ["a"] * (MAX_DOCUMENTS + 1)}, "documents",
     f"documents has {MAX_DOCUMENTS + 1} items; at most {MAX_DOCUMENTS} per request"),
    ({"query": QUERY, "documents": ["a"], "top_n": 0}, "top_n", "top_n must be a positive integer"),
    ({"query": QUERY, "documents": ["a"], "truncate": "no"}, "truncate", "truncate must be true or false"),
], ids=["no query", "empty query", "no documents", "an empty document", "too many documents", "top_n 0",
        "truncate not a bool"])
def test_bad_requests_get_400_in_the_openai_shape(served, payload, param, message):
    response = rerank(served.url, **payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(message) and error["code"] == 400


def test_unknown_model_is_404_as_on_embeddings(served):
    for path, payload in (("/v1/rerank", {"query": QUERY, "documents": ["a"]}), ("/v1/embeddings", {"input": "a"})):
        response = httpx.post(served.url + path, json={**payload, "model": "bge-reranker-v2-m3"}, timeout=60)
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert error["type"] == "not_found_error" and error["param"] == "model"
    embedder_name = rerank(served.url, model=served.embedder, query=QUERY, documents=["a"])
    assert embedder_name.status_code == 404  # the embedding model is no reranker


def test_health_and_models_list_the_reranker(served):
    health = httpx.get(served.url + "/health").json()
    assert health["status"] == "ok" and health["model"] == served.embedder
    assert health["rerank_model"] == served.reranker
    models = httpx.get(served.url + "/v1/models").json()["data"]
    assert [m["id"] for m in models] == [served.embedder, served.reranker]
    assert models[1]["task"] == "rerank" and models[1]["max_input_tokens"] == MAX_LENGTH


def test_metrics_count_the_rerankers_batches_apart_from_the_embedders(served):
    rerank_before = metric(served.url, "embedpipe_rerank_batch_sequences_sum")
    embed_before = metric(served.url, "embedpipe_batch_sequences_sum")
    assert rerank(served.url, query=QUERY, documents=DOCUMENTS).status_code == 200
    # the query's pair with each document: one sequence each, in the reranker's batches only
    assert metric(served.url, "embedpipe_rerank_batch_sequences_sum") - rerank_before == len(DOCUMENTS)
    assert metric(served.url, "embedpipe_batch_sequences_sum") == embed_before
    assert metric(served.url, "embedpipe_rerank_queue_seconds_count") > 0
    text = httpx.get(served.url + "/metrics").text
    for name in ("embedpipe_rerank_batch_tokens_bucket", "embedpipe_rerank_batch_padded_tokens_total",
                 "embedpipe_rerank_eager_runs_total"):
        assert name in text, name


def test_a_server_without_a_reranker_answers_404(tmp_path, tiny_model):
    server = ServerProcess(tmp_path / "server.log", "--model", str(tiny_model))
    try:
        response = rerank(server.url, query=QUERY, documents=["a"])
        assert response.status_code == 404 and "--rerank-model" in response.json()["error"]["message"]
        assert "rerank_model" not in httpx.get(server.url + "/health").json()
    finally:
        assert server.terminate() == 0
