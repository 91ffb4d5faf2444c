"""The server's wire format: OpenAI-compatible embeddings and search requests in, JSON bytes out.

Parsing checks every field and raises `ApiError` with a message that names the field and the
problem; nothing here touches the engine, the network or the event loop.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np
import orjson

ENCODING_FORMATS = ("float", "base64")
MAX_SEARCH_K = 1000
MAX_ECHOED_CHARS = 200  # of a client's string quoted back in an error message


class ApiError(Exception):
    """A request the server answers with `status` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}
        return dumps({"error": error})


def openai_error(error: ApiError) -> tuple[int, bytes]:
    """(status, body) of an error answered on an OpenAI-style route (tei.tei_error: on TEI's)."""
    return error.status, error.body()


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    max_inputs: int  # inputs per request
    max_input_tokens: int  # tokens per input, prompt and special tokens included
    truncate: bool  # the default: cut longer inputs (True) or reject them (False)
    dim: int  # the model's output dimension: the most `dimensions` may ask for
    vocab_size: int  # token ids must be below this


@dataclass(frozen=True)
class EmbeddingsRequest:
    texts: list[str] | None  # exactly one of texts and token_ids
    token_ids: list[list[int]] | None
    dimensions: int | None
    encoding_format: str
    truncate: bool
    prompt_name: str | None
    model: str | None  # None: not given (curl users often leave it out)

    @property
    def num_inputs(self) -> int:
        return len(self.texts if self.texts is not None else self.token_ids)


@dataclass(frozen=True)
class SearchRequest:
    queries: list[str]
    k: int
    truncate: bool
    model: str | None


def dumps(payload) -> bytes:
    """Compact UTF-8 JSON. orjson writes float32 arrays itself, with the fewest digits that read back to the same
    float32: a MiniLM vector took 248 us as json.dumps of its tolist(), 12 us so (2-core VM)."""
    return orjson.dumps(payload, default=str, option=orjson.OPT_SERIALIZE_NUMPY)


def parse_json(body: bytes) -> dict:
    try:
        payload = orjson.loads(body)  # a 2048 x 256 token-id body (3.5 MB): 31 ms, json.loads 62 ms, holding the GIL
    except orjson.JSONDecodeError as e:
        if "depth limit" in str(e):  # arrays or objects nested deeper than 1024
            raise ApiError(400, "the request body is nested too deeply") from None
        raise ApiError(400, f"the request body is not valid JSON ({e})") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return payload


def parse_embeddings(body: bytes, limits: Limits) -> EmbeddingsRequest:
    payload = parse_json(body)
    texts, token_ids = _inputs(payload.get("input"), limits)
    encoding_format = payload.get("encoding_format") or "float"
    if encoding_format not in ENCODING_FORMATS:
        raise ApiError(400, f"encoding_format must be 'float' or 'base64', not {encoding_format!r}", "encoding_format")
    return EmbeddingsRequest(texts, token_ids, checked_dimensions(payload.get("dimensions"), limits.dim),
                             encoding_format, _truncate(payload, limits), optional_str(payload, "prompt_name"),
                             optional_str(payload, "model"))


def parse_search(body: bytes, limits: Limits) -> SearchRequest:
    payload = parse_json(body)
    queries = payload.get("query")
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q for q in queries):
        raise ApiError(400, "query must be a non-empty string or a non-empty list of non-empty strings", "query")
    if len(queries) > limits.max_inputs:
        raise ApiError(400, f"query has {len(queries)} texts; at most {limits.max_inputs} per request", "query")
    k = payload.get("k", 10)
    if not _is_int(k) or not 1 <= k <= MAX_SEARCH_K:
        raise ApiError(400, f"k must be an integer from 1 to {MAX_SEARCH_K}, not {k!r}", "k")
    return SearchRequest(queries, k, _truncate(payload, limits), optional_str(payload, "model"))


def _inputs(value, limits: Limits) -> tuple[list[str] | None, list[list[int]] | None]:
    """(texts, None) or (None, token id lists) from OpenAI's `input`: a string, strings, token ids or lists of them."""
    if value is None:
        raise ApiError(400, "input is required", "input")
    one_list = isinstance(value, list) and bool(value) and _is_number(value[0])
    if isinstance(value, str) or one_list:
        value = [value]
    if not isinstance(value, list):
        raise ApiError(400, f"input must be a string, a list of strings or a list of token-id lists, "
                            f"not {type(value).__name__}", "input")
    if not value:
        raise ApiError(400, "input is empty", "input")
    if len(value) > limits.max_inputs:
        raise ApiError(400, f"input has {len(value)} items; at most {limits.max_inputs} per request", "input")
    kind = str if isinstance(value[0], str) else list
    odd = next((i for i, v in enumerate(value) if not isinstance(v, kind)), None)
    if odd is not None:
        raise ApiError(400, "input must hold only strings or only token-id lists; "
                            f"input[{odd}] is {type(value[odd]).__name__}", "input")
    if kind is str:
        return _texts(value), None
    return None, _token_ids(value, limits.vocab_size, "input" if one_list else "input[{}]")


def _texts(texts: list[str]) -> list[str]:
    for i, text in enumerate(texts):
        if not text:
            raise ApiError(400, f"input[{i}] is an empty string", "input")
    return texts


def _token_ids(lists: list[list], vocab_size: int, where: str) -> list[list[int]]:
    """lists, once each holds only integers in [0, vocab_size); `where` names list i in messages."""
    for i, ids in enumerate(lists):
        if not ids:
            raise ApiError(400, f"{where.format(i)} is an empty token-id list", "input")
        # the fast check runs in C (a 2048 x 256 request: ~10 ms; a generator of isinstance calls took ~10x)
        if set(map(type, ids)) != {int} or min(ids) < 0 or max(ids) >= vocab_size:
            j, bad = next((j, t) for j, t in enumerate(ids) if not (_is_int(t) and 0 <= t < vocab_size))
            raise ApiError(400, f"{where.format(i)}[{j}] is {json.dumps(bad)}; token ids are integers in "
                                f"[0, {vocab_size})", "input")
    return lists


def checked_dimensions(value, dim: int) -> int | None:
    if value is None:
        return None
    if not _is_int(value) or not 1 <= value <= dim:
        raise ApiError(400, f"dimensions must be an integer from 1 to {dim} (the model's dimension), "
                            f"not {value!r}", "dimensions")
    return value


def _truncate(payload: dict, limits: Limits) -> bool:
    value = payload.get("truncate", limits.truncate)
    if not isinstance(value, bool):
        raise ApiError(400, f"truncate must be true or false, not {value!r}", "truncate")
    return value


def optional_str(payload: dict, name: str) -> str | None:
    value = payload.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string, not {quoted(value)}", name)
    return value


def quoted(value) -> str:
    """A client's value in an error message, as JSON, cut to MAX_ECHOED_CHARS."""
    return dumps(value)[:MAX_ECHOED_CHARS].decode(errors="replace")


def served_name(asked: str | None, names: tuple[str, ...]) -> str:
    """The model name a response carries: the one the request asked for, which must be one of the served names,
    or (none asked for) the first served name; another is OpenAI's 404 for an unknown model."""
    if asked is None:
        return names[0]
    if asked not in names:
        raise ApiError(404, f"the model {asked[:MAX_ECHOED_CHARS]!r} is not served here; this server serves "
                            f"{', '.join(map(repr, names))}", "model", kind="not_found_error")
    return asked


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:  # what a token-id list starts with (a float one is refused by name)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_lengths(lengths: list[int], truncated: list[bool], limit: int) -> None:
    """Rejects the first input over `limit` tokens (inputs are cut to the limit only when truncation is on)."""
    for i, (length, cut) in enumerate(zip(lengths, truncated)):
        if cut or length > limit:
            raise ApiError(400, f"input[{i}] is longer than {limit} tokens; shorten it or send \"truncate\": true",
                           "input")


def shorten(vectors: np.ndarray, dimensions: int | None, normalize: bool) -> np.ndarray:
    """Matryoshka: [n, dim] -> [n, dimensions], re-normalised when the model's outputs are normalised."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    short = vectors[:, :dimensions]
    if normalize:
        short = short / np.maximum(np.linalg.norm(short, axis=1, keepdims=True), 1e-12)
    return short.astype(np.float32, copy=False)


def embeddings_response(vectors: np.ndarray, encoding_format: str, model: str, num_tokens: int) -> bytes:
    """OpenAI's embeddings response; base64 is the little-endian float32 bytes of each vector."""
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    if encoding_format == "base64":
        encoded = [base64.b64encode(row.tobytes()).decode("ascii") for row in vectors]
    else:
        encoded = list(vectors)  # rows [dim]: dumps writes float32 arrays as JSON numbers
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)]
    return dumps({"object": "list", "data": data, "model": model, "usage": usage(num_tokens)})


def search_response(hits: list[list[dict]], model: str, num_tokens: int) -> bytes:
    data = [{"object": "search_result", "index": i, "hits": h} for i, h in enumerate(hits)]
    return dumps({"object": "list", "data": data, "model": model, "usage": usage(num_tokens)})


def usage(num_tokens: int) -> dict:
    return {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
