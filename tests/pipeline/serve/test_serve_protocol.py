"""The server's wire format, without a server: parsing, errors, Matryoshka, base64, index queries."""
import base64
import json

import numpy as np
import pytest

from embedpipe.pipeline.serve.app import index_queries
from embedpipe.pipeline.serve.protocol import (ApiError, Limits, check_lengths, dumps, embeddings_response,
                                               parse_embeddings, parse_search, served_name, shorten)
from embedpipe.pipeline.serve.tei import embed_response, finish, parse_embed, tei_error
from embedpipe.pipeline.serve.timing import RequestTimes

LIMITS = Limits(max_inputs=4, max_input_tokens=8, truncate=True, dim=16, vocab_size=100)


def parse(payload, limits=LIMITS):
    return parse_embeddings(json.dumps(payload).encode(), limits)


@pytest.mark.parametrize("value, texts, token_ids", [
    ("one", ["one"], None),
    (["a", "b"], ["a", "b"], None),
    ([1, 2, 3], None, [[1, 2, 3]]),
    ([[1, 2], [3]], None, [[1, 2], [3]]),
])
def test_input_forms(value, texts, token_ids):
    request = parse({"input": value, "model": "anything"})
    assert (request.texts, request.token_ids) == (texts, token_ids)
    assert (request.encoding_format, request.dimensions, request.truncate) == ("float", None, True)


@pytest.mark.parametrize("payload, fragment", [
    ({}, "input is required"),
    ({"input": ""}, "input[0] is an empty string"),
    ({"input": []}, "input is empty"),
    ({"input": [[]]}, "input[0] is an empty token-id list"),
    ({"input": ["a"] * 5}, "at most 4 per request"),
    ({"input": 7}, "not int"),
    ({"input": ["a", [1]]}, "only strings or only token-id lists; input[1] is list"),
    ({"input": [{"text": "a"}]}, "input[0] is dict"),
    ({"input": [[1, 2.5]]}, "input[0][1] is 2.5; token ids are integers in [0, 100)"),
    ({"input": [[1, 100]]}, "input[0][1] is 100; token ids are integers in [0, 100)"),
    ({"input": [[1], [2, True]]}, "input[1][1] is true; token ids"),
    ({"input": [11, 7.0, 12]}, "input[1] is 7.0; token ids are integers"),  # was "input[0] is int"
    ({"input": [7.5]}, "input[0] is 7.5; token ids"),
    ({"input": "a", "dimensions": 17}, "dimensions must be an integer from 1 to 16"),
    ({"input": "a", "dimensions": 0}, "dimensions must be"),
    ({"input": "a", "dimensions": "8"}, "dimensions must be"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format must be"),
    ({"input": "a", "truncate": "no"}, "truncate must be true or false"),
    ({"input": "a", "prompt_name": 3}, "prompt_name must be a string"),
])
def test_bad_embeddings_requests_name_the_problem(payload, fragment):
    with pytest.raises(ApiError) as error:
        parse(payload)
    assert error.value.status == 400 and fragment in error.value.message
    body = json.loads(error.value.body())
    assert body["error"]["message"] == error.value.message and body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b"\xff"])
def test_a_body_that_is_not_a_json_object_is_rejected(body):
    with pytest.raises(ApiError, match="JSON"):
        parse_embeddings(body, LIMITS)


def test_a_body_nested_100_000_deep_is_a_400_not_a_crash():  # json.loads raised RecursionError: a 500
    with pytest.raises(ApiError, match="nested too deeply") as error:
        parse_embeddings(b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", LIMITS)
    assert error.value.status == 400


def test_search_requests():
    request = parse_search(b'{"query": "q", "k": 3}', LIMITS)
    assert (request.queries, request.k, request.truncate) == (["q"], 3, True)
    for payload, fragment in [({"query": ""}, "query must be"), ({"query": "q", "k": 0}, "k must be"),
                              ({"query": ["q"] * 5}, "at most 4"), ({"query": "q", "k": True}, "k must be")]:
        with pytest.raises(ApiError, match=fragment.replace("[", r"\[")):
            parse_search(json.dumps(payload).encode(), LIMITS)


def test_check_lengths_names_the_long_input():
    check_lengths([3, 8], [False, False], 8)
    with pytest.raises(ApiError, match=r"input\[1\] is longer than 8 tokens"):
        check_lengths([3, 9], [False, False], 8)
    with pytest.raises(ApiError, match=r"input\[0\]"):
        check_lengths([8], [True], 8)  # the tokenizer cut it


def test_shorten_truncates_and_renormalises():
    vectors = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    short = shorten(vectors, 4, normalize=True)
    assert short.shape == (3, 4) and np.allclose(np.linalg.norm(short, axis=1), 1, atol=1e-6)
    assert np.allclose(short * np.linalg.norm(vectors[:, :4], axis=1, keepdims=True), vectors[:, :4], atol=1e-6)
    assert np.array_equal(shorten(vectors, 4, normalize=False), vectors[:, :4])
    assert shorten(vectors, None, True) is vectors


def test_base64_is_little_endian_float32():
    vectors = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    floats = json.loads(embeddings_response(vectors, "float", "m", 7))
    encoded = json.loads(embeddings_response(vectors, "base64", "m", 7))
    assert floats["usage"] == {"prompt_tokens": 7, "total_tokens": 7} and floats["model"] == "m"
    for i, (f, b) in enumerate(zip(floats["data"], encoded["data"])):
        assert f["object"] == b["object"] == "embedding" and f["index"] == b["index"] == i
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        assert np.array_equal(decoded, vectors[i]) and np.array_equal(np.float32(f["embedding"]), vectors[i])


def test_index_queries_take_the_index_form():
    vectors = shorten(np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32), 16, True)
    float_meta = {"dimension": 8, "dtype": "float32"}
    assert np.allclose(index_queries(vectors, float_meta, True), shorten(vectors, 8, True))
    int8 = index_queries(vectors, {"dimension": 16, "dtype": "int8"}, True)
    assert np.array_equal(int8, np.round(np.tanh(vectors) * 127))
    binary = index_queries(vectors, {"dimension": 16, "dtype": "binary"}, True)
    assert binary.dtype == np.uint8 and np.array_equal(np.unpackbits(binary, axis=1), (vectors >= 0).astype(np.uint8))


def test_the_model_field_is_optional_but_a_string():
    assert parse({"input": "a"}).model is None and parse({"input": "a", "model": None}).model is None
    assert parse({"input": "a", "model": "m"}).model == "m"
    assert parse_search(b'{"query": "q", "model": "m"}', LIMITS).model == "m"
    for payload in ({"input": "a", "model": 3}, {"input": "a", "model": {"id": "m"}}):
        with pytest.raises(ApiError, match="model must be a string") as error:
            parse(payload)
        assert error.value.status == 400 and error.value.param == "model"


def test_served_name_echoes_a_served_name_and_refuses_others():
    names = ("alias", "minilm")
    assert served_name(None, names) == "alias" and served_name("minilm", names) == "minilm"
    with pytest.raises(ApiError) as error:
        served_name("gpt-" + "x" * 10_000, names)
    assert (error.value.status, error.value.kind, error.value.param) == (404, "not_found_error", "model")
    assert error.value.message.endswith("is not served here; this server serves 'alias', 'minilm'")
    assert len(error.value.message) < 300  # a long name asked for is quoted cut


def test_request_times_become_headers_in_milliseconds():
    times = RequestTimes(parse=0.0000123, tokenize=0.0012345, queue=0.002, inference=0.01, encode=0.0004,
                         num_tokens=12, num_chars=40)
    headers = times.headers(0.0201)
    assert headers == {"x-total-time": "20.100", "x-parse-time": "0.012", "x-tokenization-time": "1.234",
                       "x-queue-time": "2.000", "x-inference-time": "10.000", "x-encode-time": "0.400",
                       "x-compute-tokens": "12", "x-compute-characters": "40"}
    times.search = 0.003
    assert times.headers(0.03)["x-search-time"] == "3.000"
    assert times.phases() == (0.0000123, 0.0012345, 0.01, 0.0004)


def parse_tei(payload, normalized=True):
    return parse_embed(json.dumps(payload).encode(), LIMITS, normalized)


def test_tei_embed_requests_take_teis_defaults():
    request = parse_tei({"inputs": "one"})
    assert (request.texts, request.normalize, request.truncate, request.prompt_name, request.dimensions) == \
        (["one"], True, False, None, None)
    request = parse_tei({"inputs": ["a", "b"], "normalize": False, "truncate": True, "prompt_name": "query",
                         "dimensions": 8}, normalized=False)
    assert (request.texts, request.normalize, request.truncate, request.prompt_name, request.dimensions) == \
        (["a", "b"], False, True, "query", 8)


@pytest.mark.parametrize("payload, status, error_type", [
    ({"inputs": []}, 400, "Empty"),
    ({"inputs": ["a"] * 5}, 413, "Validation"),
    ({"inputs": [1, 2]}, 422, "Validation"),
    ({"inputs": "a", "normalize": False}, 422, "Validation"),
    ({"inputs": "a", "dimensions": 17}, 422, "Validation"),  # an ApiError of protocol.py, in TEI's terms
])
def test_bad_tei_requests_get_teis_statuses(payload, status, error_type):
    with pytest.raises(ApiError) as error:
        parse_tei(payload)
    assert tei_error(error.value) == (status, dumps({"error": error.value.message, "error_type": error_type}))


def test_the_shared_request_paths_errors_map_to_teis():
    for status, kind, want in ((429, "rate_limit_error", (429, "Overloaded")),
                               (503, "unavailable_error", (503, "Unhealthy")), (500, "server_error", (424, "Backend")),
                               (504, "timeout_error", (504, "Backend")),
                               (413, "invalid_request_error", (413, "Validation"))):
        got_status, body = tei_error(ApiError(status, "m", kind=kind))
        assert (got_status, json.loads(body)) == (want[0], {"error": "m", "error_type": want[1]})


def test_finish_normalises_only_what_the_engine_did_not():
    vectors = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    assert np.array_equal(finish(vectors, None, False, normalized=False), vectors)
    assert np.array_equal(finish(vectors, 4, False, normalized=False), vectors[:, :4])
    unit = finish(vectors, 4, True, normalized=False)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-6) and np.allclose(unit, shorten(vectors, 4, True))
    normalised = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    assert finish(normalised, None, True, normalized=True) is normalised  # as the engine gave it
    # float32 values, written with the fewest digits that read back to the same float32
    assert np.array_equal(np.array(json.loads(embed_response(vectors[:, :2])), dtype=np.float32), vectors[:, :2])
