"""TEI's wire format (huggingface/text-embeddings-inference, router/src/http): POST /embed and GET /info.

/embed takes {"inputs": str | [str], "normalize": true, "truncate": false, "prompt_name": null,
"dimensions": null} and answers a JSON array of vectors, one per input. Its errors are TEI's
{"error": message, "error_type": name}. TEI's statuses by error type: Empty 400, Validation 413,
Tokenizer 422, Overloaded 429, Backend 424, Unhealthy 503; a body its JSON extractor refuses (a field
missing or of the wrong type) gets 422. Here: 413 for what is too large (too many inputs, a body
over --max-body-bytes), 400 "Empty" for empty inputs, and 422 "Validation" for every other invalid
request (TEI answers 413 to some of those, an unknown prompt name or an input too long to embed
untruncated, where 422 says better that the request, not its size, is at fault).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from embedpipe.pipeline.serve.protocol import (ApiError, Limits, checked_dimensions, dumps, optional_str, parse_json,
                                               quoted, shorten)

# an ApiError of the shared request path (protocol.py, app.py) -> TEI's (status, error type)
TEI_ERRORS = {400: (422, "Validation"), 413: (413, "Validation"), 429: (429, "Overloaded"), 500: (424, "Backend"),
              503: (503, "Unhealthy"), 504: (504, "Backend")}
TEI_POOLING = {"lasttoken": "last_token"}  # TEI's names where ours differ
TRUNCATION_DIRECTIONS = ("right", "Right")  # the tokenizer cuts the end of a text; TEI's "left" is not available


class TeiError(ApiError):
    """An error of /embed answered with TEI's status and error type as given."""

    def __init__(self, status: int, message: str, error_type: str = "Validation"):
        super().__init__(status, message)
        self.error_type = error_type


@dataclass(frozen=True)
class EmbedRequest:
    texts: list[str]
    normalize: bool
    truncate: bool
    prompt_name: str | None
    dimensions: int | None


def parse_embed(body: bytes, limits: Limits, normalized: bool) -> EmbedRequest:
    """TEI's embed request; `normalized`: whether the engine normalises its vectors (on the device), in which
    case the unnormalised ones are not to be had."""
    payload = parse_json(body)
    texts = _inputs(payload.get("inputs"), limits.max_inputs)
    normalize, truncate = _bool(payload, "normalize", True), _bool(payload, "truncate", False)
    if not normalize and normalized:
        raise TeiError(422, "this server's model normalises on the device; normalize=false is not available")
    direction = payload.get("truncation_direction")
    if direction is not None and direction not in TRUNCATION_DIRECTIONS:
        raise TeiError(422, f"truncation_direction must be \"right\" here (texts are cut at the end), not "
                            f"{quoted(direction)}")
    return EmbedRequest(texts, normalize, truncate, optional_str(payload, "prompt_name"),
                        checked_dimensions(payload.get("dimensions"), limits.dim))


def _inputs(value, max_inputs: int) -> list[str]:
    """The texts of TEI's `inputs`: a string or a list of strings, at most max_inputs, none empty."""
    if value is None:
        raise TeiError(422, "inputs is required: a string or a list of strings")
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise TeiError(422, f"inputs must be a string or a list of strings, not {type(value).__name__}")
    if len(texts) > max_inputs:
        raise TeiError(413, f"batch size {len(texts)} > maximum allowed batch size {max_inputs}")
    odd = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if odd is not None:
        raise TeiError(422, f"inputs must hold only strings; inputs[{odd}] is {type(texts[odd]).__name__}")
    if not texts:
        raise TeiError(400, "`inputs` cannot be empty", "Empty")
    empty = next((i for i, text in enumerate(texts) if not text), None)
    if empty is not None:
        raise TeiError(400, f"inputs[{empty}] is an empty string", "Empty")
    return texts


def _bool(payload: dict, name: str, default: bool) -> bool:
    value = payload.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise TeiError(422, f"{name} must be true or false, not {quoted(value)}")
    return value


def finish(vectors: np.ndarray, dimensions: int | None, normalize: bool, normalized: bool) -> np.ndarray:
    """The engine's vectors [n, dim] as asked for: shortened to `dimensions` (Matryoshka), and L2-normalised when
    asked (`normalized`: the engine's already are, and shortened ones are re-normalised)."""
    vectors = shorten(vectors, dimensions, normalized)
    if normalize and not normalized:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors.astype(np.float32, copy=False)


def embed_response(vectors: np.ndarray) -> bytes:
    """TEI's embed response: [[float, ...], ...], one vector per input."""
    return dumps(np.ascontiguousarray(vectors, dtype="<f4"))


def tei_error(error: ApiError) -> tuple[int, bytes]:
    """(status, body) of an error answered on /embed, in TEI's shape."""
    if isinstance(error, TeiError):
        status, error_type = error.status, error.error_type
    else:
        status, error_type = TEI_ERRORS.get(error.status, (error.status, "Backend"))
    return status, dumps({"error": error.message, "error_type": error_type})


def tei_info(model, config, max_input_length: int) -> bytes:
    """TEI's GET /info of an app.ServedModel served under an app.ServeConfig: TEI's fields that apply here
    (model_sha: none, the model is a local folder)."""
    pooling = TEI_POOLING.get(model.output.pooling, model.output.pooling)
    return dumps({"model_id": model.name, "model_sha": None, "model_dtype": model.dtype,
                  "model_type": {"embedding": {"pooling": pooling}},
                  "max_concurrent_requests": config.max_queue, "max_input_length": max_input_length,
                  "max_batch_tokens": config.batching.max_batch_tokens,
                  "max_batch_requests": config.batching.max_batch_seqs, "max_client_batch_size": config.max_inputs,
                  "auto_truncate": False, "tokenization_workers": config.tokenizer_threads,
                  "version": _version(), "sha": None, "docker_label": None})


@cache
def _version() -> str:
    from importlib.metadata import version
    return version("embedpipe")
