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
from embedpipe.pipeline.serve.app import EmbedServer, ServeConfig, local_server
from embedpipe.pipeline.serve.launch import load_index
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
        assert cosine(vectors(embed(live.url, input=text)), embed_texts(minilm, make_tokenizer(minilm), [text])) >= 0.9999
        for status in ("429", "504", "200"):
            assert f'embedpipe_requests_total{{endpoint="embeddings",status="{status}"}}' in httpx.get(live.url + "/metrics").text
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
