"""`embedpipe serve` in a subprocess, over real HTTP on loopback: OpenAI clients, concurrency, errors, search,
model names, timing headers, TEI's /embed and /info."""
import json
import threading
import time
from importlib.metadata import version
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from support.numerics import cosine
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from support.serve_client import ServerProcess, embed, metric, vectors, write_index

pytestmark = pytest.mark.slow
NUM_DOCS = 60
MAX_INPUTS = 64
ALIAS = "embedder"  # --served-model-name


@pytest.fixture(scope="module", params=[1, 2], ids=["in-engine-process", "2-http-processes"])
def served(request, tmp_path_factory, minilm, texts):
    """The server with HTTP in the engine process, and with two HTTP processes in front of it."""
    folder = tmp_path_factory.mktemp("serve")
    docs = [t for t in texts if 0 < len(t) < 300][:NUM_DOCS]
    doc_vectors = embed_texts(minilm, make_tokenizer(minilm), docs)
    index = write_index(folder, [f"doc-{i}" for i in range(len(docs))], [d[:20] for d in docs], doc_vectors)
    server = ServerProcess(folder / "server.log", "--index", str(index), "--max-inputs", str(MAX_INPUTS),
                           "--http-workers", str(request.param), "--served-model-name", ALIAS)
    yield SimpleNamespace(url=server.url, docs=docs, doc_vectors=doc_vectors, minilm=minilm)
    assert server.terminate() == 0, (folder / "server.log").read_text()


def expected(minilm, texts):
    return embed_texts(minilm, make_tokenizer(minilm), texts)


def test_health_and_models(served):
    health = httpx.get(served.url + "/health").json()
    assert health == {"status": "ok", "model": "minilm", "dimensions": 384, "index_dimensions": 384,
                      "max_input_tokens": 256, "index_rows": NUM_DOCS}
    models = httpx.get(served.url + "/v1/models").json()["data"]
    assert [m["id"] for m in models] == [ALIAS, "minilm"]  # --served-model-name first: what responses carry
    assert all(m["dimensions"] == 384 and m["index_dimensions"] == 384 and m["object"] == "model" for m in models)


def test_requests_name_a_served_model_or_none(served):
    search = {"query": served.docs[0], "k": 1}
    for asked, echoed in (("minilm", "minilm"), (ALIAS, ALIAS), (None, ALIAS)):
        named = {} if asked is None else {"model": asked}
        assert embed(served.url, input="a text", **named).json()["model"] == echoed
        assert httpx.post(served.url + "/v1/search", json={**search, **named}).json()["model"] == echoed
    assert embed(served.url, input="a text", model=None).json()["model"] == ALIAS  # null: as if not given
    for path, payload in (("/v1/embeddings", {"input": "x"}), ("/v1/search", search)):
        unknown = httpx.post(served.url + path, json={**payload, "model": "text-embedding-3-small"})
        assert unknown.status_code == 404, unknown.text
        error = unknown.json()["error"]
        assert error["type"] == "not_found_error" and error["param"] == "model" and error["code"] == 404
        assert error["message"] == (f"the model 'text-embedding-3-small' is not served here; this server serves "
                                    f"'{ALIAS}', 'minilm'")
        wrong_type = httpx.post(served.url + path, json={**payload, "model": ["minilm"]})
        assert wrong_type.status_code == 400 and 'model must be a string, not ["minilm"]' in error_of(wrong_type)


def error_of(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


PHASE_HEADERS = ("parse", "tokenization", "queue", "inference", "encode")
ENDPOINTS = ("embeddings", "embed", "search")  # the metrics' names of /v1/embeddings, /embed, /v1/search


def phase_times(response: httpx.Response) -> tuple[float, dict[str, float]]:
    """(x-total-time, {phase: x-<phase>-time}) of an answer, in ms; x-search-time too when there."""
    assert response.status_code == 200, response.text
    names = [*PHASE_HEADERS, *(["search"] if "x-search-time" in response.headers else [])]
    return float(response.headers["x-total-time"]), {name: float(response.headers[f"x-{name}-time"]) for name in names}


def test_answers_carry_the_time_of_each_phase_and_the_metrics_keep_it(served):
    texts = ["time this text", "and this one"]
    for endpoint, path, payload in (("embeddings", "/v1/embeddings", {"input": texts}),
                                    ("embed", "/embed", {"inputs": texts}),
                                    ("search", "/v1/search", {"query": texts, "k": 2})):
        response = httpx.post(served.url + path, json=payload, timeout=60)
        total, parts = phase_times(response)
        assert all(ms >= 0 for ms in parts.values()) and parts["inference"] > 0, parts
        assert total + 0.01 * len(parts) >= sum(parts.values()), (total, parts)  # each part rounded to 1 us
        assert ("search" in parts) == (endpoint == "search")
        assert int(response.headers["x-compute-characters"]) == sum(map(len, texts))
        tokens = int(response.headers["x-compute-tokens"])
        assert tokens == sum(map(len, make_tokenizer(served.minilm).encode(texts)[0]))
        if endpoint != "embed":
            assert tokens == response.json()["usage"]["prompt_tokens"]
    assert "x-total-time" not in embed(served.url, input="").headers  # an error has no phases
    wanted = [f'embedpipe_request_{phase}_seconds_count{{endpoint="{endpoint}"}}' for endpoint in ENDPOINTS
              for phase in ("parse", "tokenize", "inference", "encode")]
    deadline = time.monotonic() + 10  # the other HTTP process's updates come within its next flush
    while missing := [name for name in wanted if name not in httpx.get(served.url + "/metrics").text]:
        assert time.monotonic() < deadline, missing
        time.sleep(0.05)


def test_tei_embed_answers_what_v1_embeddings_does(served):
    texts = served.docs[:4]
    want = vectors(embed(served.url, input=texts))
    response = httpx.post(served.url + "/embed", json={"inputs": texts}, timeout=60)
    assert response.status_code == 200, response.text
    got = np.array(response.json(), dtype=np.float32)
    assert got.shape == (4, 384) and cosine(got, want).min() >= 0.99999
    one = httpx.post(served.url + "/embed", json={"inputs": texts[0]}).json()  # a string: one vector all the same
    assert len(one) == 1 and cosine(np.array(one, np.float32), want[:1]).min() >= 0.99999
    short = np.array(httpx.post(served.url + "/embed", json={"inputs": texts[0], "dimensions": 128}).json()[0])
    assert short.shape == (128,) and abs(np.linalg.norm(short) - 1) < 1e-5
    assert cosine(short[None], vectors(embed(served.url, input=texts[0], dimensions=128))).min() >= 0.99999
    long = {"inputs": "word " * 300, "truncate": True}  # TEI's default is no truncation (BAD_TEI_REQUESTS)
    assert len(httpx.post(served.url + "/embed", json=long).json()[0]) == 384


def test_tei_info(served):
    info = httpx.get(served.url + "/info").json()
    assert info == {"model_id": "minilm", "model_sha": None, "model_dtype": "float32",
                    "model_type": {"embedding": {"pooling": "mean"}}, "max_concurrent_requests": 512,
                    "max_input_length": 256, "max_batch_tokens": 16384, "max_batch_requests": 512,
                    "max_client_batch_size": MAX_INPUTS, "auto_truncate": False, "tokenization_workers": 4,
                    "version": version("embedpipe"), "sha": None, "docker_label": None}


BAD_TEI_REQUESTS = [
    ({"inputs": []}, 400, "Empty", "`inputs` cannot be empty"),
    ({"inputs": ["a", ""]}, 400, "Empty", "inputs[1] is an empty string"),
    ({"inputs": ["x"] * (MAX_INPUTS + 1)}, 413, "Validation",
     f"batch size {MAX_INPUTS + 1} > maximum allowed batch size {MAX_INPUTS}"),
    ({"input": "a"}, 422, "Validation", "inputs is required"),
    ({"inputs": 3}, 422, "Validation", "inputs must be a string or a list of strings, not int"),
    ({"inputs": ["a", 3]}, 422, "Validation", "inputs[1] is int"),
    ({"inputs": "a", "normalize": False}, 422, "Validation",
     "this server's model normalises on the device; normalize=false is not available"),
    ({"inputs": "a", "normalize": "no"}, 422, "Validation", 'normalize must be true or false, not "no"'),
    ({"inputs": "a", "truncate": 1}, 422, "Validation", "truncate must be true or false, not 1"),
    ({"inputs": "a", "dimensions": 385}, 422, "Validation", "dimensions must be an integer from 1 to 384"),
    ({"inputs": "a", "prompt_name": "query"}, 422, "Validation", "no prompt named 'query'"),
    ({"inputs": "a", "truncation_direction": "Left"}, 422, "Validation", 'must be "right" here'),
    ({"inputs": "word " * 300}, 422, "Validation", "input[0] is longer than 256 tokens"),  # truncate: false
    (b"{not json", 422, "Validation", "not valid JSON"),
    (b"[1]", 422, "Validation", "must be a JSON object"),
]


@pytest.mark.parametrize("payload, status, error_type, fragment", BAD_TEI_REQUESTS)
def test_bad_tei_requests_get_tei_errors(served, payload, status, error_type, fragment):
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    response = httpx.post(served.url + "/embed", content=content, timeout=60)
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type
    assert fragment in body["error"], body


def test_the_openai_client_works_unchanged(served):
    import openai
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    texts = served.docs[:5]
    tokens = sum(map(len, make_tokenizer(served.minilm).encode(texts)[0]))
    for kwargs in ({}, {"encoding_format": "float"}):  # the client asks for base64 unless told otherwise
        response = client.embeddings.create(model="minilm", input=texts, **kwargs)
        got = np.array([d.embedding for d in response.data])
        assert cosine(got, served.doc_vectors[:5]).min() >= 0.9999
        assert response.usage.prompt_tokens == response.usage.total_tokens == tokens
        assert response.model == "minilm" and [d.index for d in response.data] == list(range(5))
    short = client.embeddings.create(model="minilm", input=texts[0], dimensions=128)
    truncated = served.doc_vectors[0, :128] / np.linalg.norm(served.doc_vectors[0, :128])
    assert len(short.data[0].embedding) == 128
    assert cosine(np.array(short.data[0].embedding), truncated) >= 0.9999
    assert abs(np.linalg.norm(short.data[0].embedding) - 1) < 1e-5


def test_raw_http_inputs_strings_and_token_ids(served):
    text = served.docs[7]
    ids = make_tokenizer(served.minilm).encode([text])[0][0]
    reference = served.doc_vectors[7:8]
    for value in (text, [text], ids, [ids, ids]):
        got = vectors(embed(served.url, model="minilm", input=value))
        assert cosine(got, reference).min() >= 0.9999, value
    floats = vectors(embed(served.url, input=text, encoding_format="float"))
    decoded = vectors(embed(served.url, input=text, encoding_format="base64"))
    assert np.array_equal(floats, decoded)  # the same lone request twice: the same batch, the same floats


def test_long_inputs_are_truncated_by_default(served):
    response = embed(served.url, input="word " * 400)
    assert response.status_code == 200 and response.json()["usage"]["prompt_tokens"] == 256


def test_thirty_two_concurrent_clients_get_their_own_answers(served):
    """Across the HTTP processes' pipes too (wire.py frames, replies read on each loop): every answer is its own."""
    num_clients, num_requests = 32, 25
    texts = [f"request {c}-{r}: {served.docs[(c * num_requests + r) % NUM_DOCS][:40]}"
             for c in range(num_clients) for r in range(num_requests)]
    reference = expected(served.minilm, texts)
    results, errors = {}, []

    def client(c):
        with httpx.Client(timeout=120) as http:
            for r in range(num_requests):
                i = c * num_requests + r
                count = 2 if i % 5 == 0 else 1  # its own text, and every fifth request its neighbour's
                batch = [texts[(i + j) % len(texts)] for j in range(count)]
                try:
                    results[i] = (count, vectors(embed(served.url, http, input=batch)))
                except Exception as error:  # noqa: BLE001 - collected and reported below
                    errors.append(f"request {i}: {error!r}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(num_clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert len(results) == num_clients * num_requests
    for i, (count, got) in results.items():
        want = reference[[(i + j) % len(texts) for j in range(count)]]
        assert got.shape == want.shape and cosine(got, want).min() >= 0.9999, f"request {i} got another's answer"


BAD_REQUESTS = [
    ({"input": ""}, 400, "input[0] is an empty string"),
    ({"input": []}, 400, "input is empty"),
    ({"model": "minilm"}, 400, "input is required"),
    ({"input": ["x"] * (MAX_INPUTS + 1)}, 400, f"at most {MAX_INPUTS} per request"),
    ({"input": 3}, 400, "input must be a string"),
    ({"input": [{"text": "a"}]}, 400, "input[0] is dict"),
    ({"input": [[101, -1]]}, 400, "input[0][1] is -1; token ids are integers in [0, 30522)"),
    ({"input": [101, 7.0, 102]}, 400, "input[1] is 7.0; token ids are integers"),
    (b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
    ({"input": "a", "dimensions": 385}, 400, "dimensions must be an integer from 1 to 384"),
    ({"input": "a", "encoding_format": "bits"}, 400, "encoding_format must be"),
    ({"input": ["ok", "word " * 300], "truncate": False}, 400, "input[1] is longer than 256 tokens"),
    ({"input": [[101] * 300], "truncate": False}, 400, "input[0] is longer than 256 tokens"),
    ({"input": "a", "prompt_name": "query"}, 400, "no prompt named 'query'"),
    (b"{not json", 400, "not valid JSON"),
]


@pytest.mark.parametrize("payload, status, fragment", BAD_REQUESTS)
def test_bad_requests_get_a_json_error_and_the_server_goes_on(served, payload, status, fragment):
    if isinstance(payload, bytes):
        response = httpx.post(served.url + "/v1/embeddings", content=payload, timeout=60)
    else:
        response = embed(served.url, **payload)
    assert response.status_code == status
    assert fragment in response.json()["error"]["message"]
    assert vectors(embed(served.url, input="still serving")).shape == (1, 384)


def test_unknown_paths_and_methods_get_a_json_error(served):
    missing = httpx.post(served.url + "/v1/embedding", json={"input": "x"})
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "POST /v1/embedding is not an endpoint of this server"
    wrong = httpx.get(served.url + "/v1/embeddings")
    assert wrong.status_code == 405 and wrong.json()["error"]["message"] == "/v1/embeddings does not take GET"


def test_search_returns_ids_scores_and_kept_columns(served):
    response = httpx.post(served.url + "/v1/search", json={"query": served.docs[3], "k": 5}, timeout=60)
    assert response.status_code == 200, response.text
    body = response.json()
    hits = body["data"][0]["hits"]
    assert len(hits) == 5 and hits[0]["id"] == "doc-3" and hits[0]["title"] == served.docs[3][:20]
    assert hits[0]["score"] >= 0.999
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    expected_scores = served.doc_vectors @ served.doc_vectors[3]
    assert np.allclose(scores, np.sort(expected_scores)[::-1][:5], atol=1e-4)
    two = httpx.post(served.url + "/v1/search", json={"query": [served.docs[1], served.docs[2]], "k": 1}).json()
    assert [d["hits"][0]["id"] for d in two["data"]] == ["doc-1", "doc-2"]
    assert body["usage"]["prompt_tokens"] > 0
    bad = httpx.post(served.url + "/v1/search", json={"query": "x", "k": 0})
    assert bad.status_code == 400 and "k must be" in bad.json()["error"]["message"]


def test_metrics_count_requests_tokens_and_batches(served):
    before = metric(served.url, "embedpipe_tokens_total")
    usage = embed(served.url, input=["count these tokens", "and these"]).json()["usage"]
    assert metric(served.url, "embedpipe_tokens_total") - before == usage["prompt_tokens"]
    text = httpx.get(served.url + "/metrics").text
    for name in ('embedpipe_requests_total{endpoint="embeddings",status="200"}', "embedpipe_requests_active",
                 "embedpipe_request_seconds_bucket", "embedpipe_queue_seconds_bucket",
                 "embedpipe_batch_sequences_bucket", "embedpipe_batch_tokens_bucket", "embedpipe_graph_replays_total"):
        assert name in text, name
    assert metric(served.url, "embedpipe_batch_sequences_count") > 0
