"""Server limits and modes, in-process (uvicorn on a thread, real HTTP on loopback): 429, 504, 503, 404, prompts."""
import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from support.numerics import cosine
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.models.model_folder import builtin_models
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.serve.app import CLIENT_CLOSED, EmbedServer, local_server
from embedpipe.pipeline.serve.config import ServeConfig
from embedpipe.pipeline.serve.launch import load_index
from embedpipe.pipeline.serve.protocol import shorten
from support.serve_client import GatedEngine, InProcessServer, embed, metric, vectors, write_index


def make_server(engine, index=None, **overrides) -> EmbedServer:
    return local_server(ServeConfig(engine=engine.config, **overrides), engine, index)


def error(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


def test_a_full_queue_gets_429_a_stuck_request_504_and_the_server_recovers(minilm):
    engine = GatedEngine(minilm)  # the engine thread blocks on its first batch until the gate opens
    server = make_server(engine, max_queue=2, request_timeout=1.0)
    with InProcessServer(server) as live, ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(embed, live.url, input=f"waiting {i}") for i in range(2)]
        deadline = time.monotonic() + 10
        while server.active < 2:
            assert time.monotonic() < deadline, "the two requests were never admitted"
            time.sleep(0.01)
        full = embed(live.url, input="one too many")
        assert full.status_code == 429 and "the queue is full (2 requests)" in error(full)
        for future in waiting:
            response = future.result()
            assert response.status_code == 504 and "longer than 1 s" in error(response)
        engine.gate.set()
        text = "served again once the engine moves"
        assert cosine(vectors(embed(live.url, input=text)),
                      embed_texts(minilm, make_tokenizer(minilm), [text])) >= 0.9999
        for status in ("429", "504", "200"):
            assert (f'embedpipe_requests_total{{endpoint="embeddings",status="{status}"}}'
                    in httpx.get(live.url + "/metrics").text)
        assert metric(live.url, "embedpipe_requests_active") == 0


def test_draining_answers_503_and_without_an_index_search_is_404(minilm):
    server = make_server(minilm)
    with InProcessServer(server) as live:
        missing = httpx.post(live.url + "/v1/search", json={"query": "x"})
        assert missing.status_code == 404 and "no index" in error(missing)
        assert httpx.get(live.url + "/health").json()["index_rows"] is None
        server.draining = True  # what a SIGTERM sets before uvicorn stops listening
        refused = embed(live.url, input="too late")
        assert refused.status_code == 503 and "shutting down" in error(refused)
        assert httpx.get(live.url + "/health").status_code == 503


@pytest.fixture
def prompted_model(tmp_path):
    """all-MiniLM-L6-v2 with a "query" prompt in its sentence-transformers config (files linked, not copied)."""
    folder = tmp_path / "prompted"
    folder.mkdir()
    for path in builtin_models()["minilm"].iterdir():
        if path.name != "config_sentence_transformers.json":
            (folder / path.name).symlink_to(path)
    prompts = {"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": None}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(prompts))
    return folder


def test_search_applies_the_query_prompt(tmp_path, prompted_model):
    engine = Engine(EngineConfig(model=str(prompted_model), device="cpu"))
    docs = ["the cat sat on the mat", "stock markets fell sharply today", "a recipe for lemon cake"]
    doc_vectors = embed_texts(engine, make_tokenizer(engine), docs)
    index = write_index(tmp_path, ["cat", "stocks", "cake"], docs, doc_vectors, model=str(prompted_model))
    query = "where did the cat sit"
    prompted = embed_texts(engine, make_tokenizer(engine, prompt_name="query"), [query])[0]
    plain = embed_texts(engine, make_tokenizer(engine), [query])[0]
    with InProcessServer(make_server(engine, load_index(index, engine))) as live:
        response = httpx.post(live.url + "/v1/search", json={"query": query, "k": 3})
        scores = {hit["id"]: hit["score"] for hit in response.json()["data"][0]["hits"]}
        got = np.array([scores[name] for name in ("cat", "stocks", "cake")])
        assert np.allclose(got, doc_vectors @ prompted, atol=1e-4)
        assert not np.allclose(got, doc_vectors @ plain, atol=1e-4)
        named = vectors(embed(live.url, input=query, prompt_name="query"))
        assert cosine(named, prompted[None]) >= 0.9999 and cosine(named, plain[None]) < 0.999
        unknown = embed(live.url, input=query, prompt_name="passage")
        assert unknown.status_code == 400 and "'document', 'query'" in error(unknown)


def test_an_index_of_another_model_is_refused(tmp_path, minilm):
    vectors = embed_texts(minilm, make_tokenizer(minilm), ["one text"])
    index = write_index(tmp_path, ["a"], ["t"], vectors, model="/models/another")
    with pytest.raises(ValueError, match="serve it with --model /models/another"):
        load_index(index, minilm)


def test_a_body_over_max_body_bytes_gets_413_before_it_is_read_and_the_server_goes_on(minilm):
    """A 300 MB body was accepted (RSS 1.15 -> 2.05 GB); now the Content-Length, or the bytes streamed so far
    without one, are held to --max-body-bytes."""
    server = make_server(minilm, max_body_bytes=10_000)
    body = json.dumps({"input": "x " * 6_000}).encode()  # 12 kB
    with InProcessServer(server) as live:
        declared = httpx.post(live.url + "/v1/embeddings", content=body, headers={"content-type": "application/json"})
        streamed = httpx.post(live.url + "/v1/embeddings", content=iter([body[:6_000], body[6_000:]]))  # chunked
        for response in (declared, streamed):
            assert response.status_code == 413 and "larger than 10000 bytes" in error(response)
            assert response.json()["error"]["type"] == "invalid_request_error"
        assert vectors(embed(live.url, input="x " * 100)).shape == (1, 384)
        assert 'status="413"' in httpx.get(live.url + "/metrics").text


def test_the_default_body_limit_holds_max_inputs_texts_of_max_tokens():
    from embedpipe.pipeline.serve.config import default_max_body_bytes
    assert default_max_body_bytes(2048, 256) == 2048 * 256 * 16  # 8 MiB: all-MiniLM-L6-v2's largest request
    assert default_max_body_bytes(1, 8) == 1 << 20 and default_max_body_bytes(2048, 32768) == 64 << 20


def send_and_hang_up(url: str, payload: dict) -> None:
    """A client that sends its whole request, then closes the connection without reading the answer."""
    import socket
    import urllib.parse
    address = urllib.parse.urlsplit(url)
    body = json.dumps(payload).encode()
    with socket.create_connection((address.hostname, address.port)) as client:
        client.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
                       + f"content-length: {len(body)}\r\n\r\n".encode() + body)
        deadline = time.monotonic() + 10
        while not admitted(url):
            assert time.monotonic() < deadline, "the request was never admitted"
            time.sleep(0.01)


def admitted(url: str) -> bool:
    return metric(url, "embedpipe_requests_active") >= 1


def test_a_client_that_disconnects_has_its_work_cancelled_and_is_counted_499(minilm, texts):
    """Its work ran on to the 30 s timeout while a small request waited 28 s behind it, and was counted as 500."""
    engine = GatedEngine(minilm)  # the engine thread blocks on its first batch until the gate opens
    server = make_server(engine, batching=BatcherConfig(max_batch_tokens=2048))
    with InProcessServer(server) as live:
        send_and_hang_up(live.url, {"input": [texts[i % len(texts)] for i in range(512)]})  # ~40 batches
        deadline = time.monotonic() + 5
        while server.active:  # the gate is still shut: only cancelling the request ends it
            assert time.monotonic() < deadline, "the request of the disconnected client was not cancelled"
            time.sleep(0.01)
        engine.gate.set()
        assert vectors(embed(live.url, input="answered at once")).shape == (1, 384)
        embedded = sum(len(tags) for tags in engine.batches)
        assert embedded < 512 // 4, f"{embedded} sequences of the cancelled request were embedded"
        page = httpx.get(live.url + "/metrics").text
        assert f'status="{CLIENT_CLOSED}"' in page and 'status="500"' not in page, page


def test_an_engine_thread_that_fails_outside_a_batch_fails_every_request_with_503(minilm, monkeypatch):
    """An exception in the engine thread's own loop killed it silently: every request then waited for the timeout."""
    server = make_server(minilm)
    with InProcessServer(server) as live:
        assert vectors(embed(live.url, input="before")).shape == (1, 384)
        scheduler = server.backend.scheduler

        def broken_add(*args):
            raise RuntimeError("injected batcher fault")

        monkeypatch.setattr(scheduler._batcher, "add", broken_add)
        failed = embed(live.url, input="the fault happens here")
        after = embed(live.url, input="and after it")
        for response in (failed, after):
            assert response.status_code == 503, response.text
            assert "the engine thread failed (RuntimeError: injected batcher fault)" in error(response)
        assert httpx.get(live.url + "/health").status_code == 503
        assert server.backend.failure is not None


def test_health_and_models_report_the_embeddings_width_and_the_index_dimension(tmp_path, minilm):
    """/v1/search shortens queries to the index's dimension; /v1/embeddings answers the model's full width."""
    docs = ["the cat sat on the mat", "stock markets fell sharply today", "a recipe for lemon cake"]
    doc_vectors = shorten(embed_texts(minilm, make_tokenizer(minilm), docs), 128, True)
    index = write_index(tmp_path, ["cat", "stocks", "cake"], docs, doc_vectors)
    with InProcessServer(make_server(minilm, load_index(index, minilm))) as live:
        health = httpx.get(live.url + "/health").json()
        assert (health["dimensions"], health["index_dimensions"], health["index_rows"]) == (384, 128, 3)
        model = httpx.get(live.url + "/v1/models").json()["data"][0]
        assert (model["id"], model["dimensions"], model["index_dimensions"]) == ("minilm", 384, 128)
        assert vectors(embed(live.url, input=docs[0])).shape == (1, 384)
        query = "where did the cat sit"
        hits = httpx.post(live.url + "/v1/search", json={"query": query, "k": 3}).json()["data"][0]["hits"]
        short_query = shorten(embed_texts(minilm, make_tokenizer(minilm), [query]), 128, True)[0]
        assert hits[0]["id"] == "cat" and abs(hits[0]["score"] - float(doc_vectors[0] @ short_query)) < 1e-4


def test_tei_normalize_false_is_served_when_the_model_does_not_normalise():
    """The engine normalises on the device for a normalising model (then normalize=false is a 422); for one that
    does not, /embed gives its pooled vectors as they are, or normalised on the CPU."""
    engine = Engine(EngineConfig(model="minilm", device="cpu", normalize=False))
    texts = ["an unnormalised vector", "and another, somewhat longer, text"]
    with InProcessServer(make_server(engine)) as live:
        raw = vectors(embed(live.url, input=texts))
        assert not np.allclose(np.linalg.norm(raw, axis=1), 1, atol=1e-3)

        def tei(**payload):
            response = httpx.post(live.url + "/embed", json={"inputs": texts, **payload})
            assert response.status_code == 200, response.text
            return np.array(response.json(), dtype=np.float32)

        assert np.allclose(tei(normalize=False), raw, rtol=1e-5, atol=1e-6)
        assert np.allclose(tei(normalize=False, dimensions=64), raw[:, :64], rtol=1e-5, atol=1e-6)
        unit = tei()  # TEI's default: normalised
        assert np.allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-5) and cosine(unit, raw).min() >= 0.99999
        short = tei(dimensions=64)
        assert np.allclose(short, shorten(raw, 64, True), atol=1e-6)
