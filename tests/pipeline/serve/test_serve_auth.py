"""--api-key, in-process (uvicorn on a thread, real HTTP on loopback): 401 without the key on every route but
GET /health, the key kept out of answers and reprs, keys no client could send refused."""
import base64
import pickle

import httpx
import pytest

from embedpipe.pipeline.serve.app import create_app, local_server
from embedpipe.pipeline.serve.config import ServeConfig
from support.serve_client import InProcessServer

KEY = "sk-embedpipe-test-0123456789"
RIGHT = {"Authorization": f"Bearer {KEY}"}
ROUTES = [("POST", "/v1/embeddings", {"input": "x"}), ("POST", "/v1/search", {"query": "x"}),
          ("GET", "/v1/models", None), ("GET", "/metrics", None), ("POST", "/embed", {"inputs": "x"}),
          ("GET", "/info", None), ("GET", "/no/such/route", None), ("POST", "/health", None)]


@pytest.fixture(scope="module")
def live(minilm):
    with InProcessServer(local_server(ServeConfig(engine=minilm.config, api_key=KEY), minilm)) as server:
        yield server


@pytest.mark.parametrize("headers, challenge", [
    ({}, "Bearer"),
    ({"Authorization": "Bearer wrong-key"}, 'Bearer error="invalid_token"'),
    ({"Authorization": f"Bearer {KEY}x"}, 'Bearer error="invalid_token"'),  # a longer key
    ({"Authorization": f"Bearer {KEY[:-1]}"}, 'Bearer error="invalid_token"'),  # a prefix of it
    ({"Authorization": "Basic " + base64.b64encode(f"user:{KEY}".encode()).decode()}, "Bearer"),
    ({"Authorization": KEY}, "Bearer"),  # the key without a scheme
    ({"Authorization": "Bearer"}, 'Bearer error="invalid_token"'),
], ids=["missing", "wrong", "longer", "prefix", "basic", "no-scheme", "empty-bearer"])
def test_a_request_without_the_right_key_gets_401_on_every_route_but_health(live, headers, challenge):
    for method, path, payload in ROUTES:
        response = httpx.request(method, live.url + path, json=payload, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"] == challenge
        error = response.json()["error"]
        assert error["type"] == "authentication_error" and error["code"] == 401 and error["param"] is None
        assert KEY not in response.text and "wrong-key" not in response.text  # neither key is echoed
    assert httpx.get(live.url + "/health", headers=headers).status_code == 200  # a load balancer's check


def test_the_right_key_opens_every_route(live):
    assert httpx.post(live.url + "/v1/embeddings", json={"input": "x"}, headers=RIGHT).status_code == 200
    assert httpx.post(live.url + "/embed", json={"inputs": "x"}, headers=RIGHT).status_code == 200
    for path in ("/v1/models", "/metrics", "/info", "/health"):
        assert httpx.get(live.url + path, headers=RIGHT).status_code == 200, path
    assert httpx.post(live.url + "/v1/search", json={"query": "x"}, headers=RIGHT).status_code == 404  # no index
    assert httpx.get(live.url + "/no/such/route", headers=RIGHT).status_code == 404
    lower = {"Authorization": f"bearer {KEY}"}  # the scheme is case-insensitive (RFC 7235)
    assert httpx.get(live.url + "/v1/models", headers=lower).status_code == 200
    refused = httpx.post(live.url + "/v1/embeddings", json={"input": "x"})
    assert refused.status_code == 401 and "x-total-time" not in refused.headers  # refused before any work


def test_the_key_stays_out_of_reprs_and_travels_to_http_processes(minilm):
    config = ServeConfig(engine=minilm.config, api_key=KEY)
    assert KEY not in repr(config) and KEY not in str(config)
    assert pickle.loads(pickle.dumps(config)).api_key == KEY  # --http-workers: the HTTP processes get a copy
    app = create_app(local_server(config, minilm))
    assert KEY not in repr(app.user_middleware)  # Starlette's Middleware shows its options


@pytest.mark.parametrize("key", ["", "two words", "tab\tkey", "naïve", "line\n"])
def test_a_key_no_client_could_send_is_a_usage_error(key):
    with pytest.raises(ValueError, match=r"the API key \(--api-key or EMBEDPIPE_API_KEY\) must be") as error:
        ServeConfig(api_key=key)
    assert not key or key not in str(error.value)
