"""POST /v1/rerank: a query's documents scored by the server's reranker (--rerank-model), in the request shape that
TEI, Jina and Cohere clients send.

Request: {"model": str?, "query": str, "documents": [str | {"text": str}], "top_n": int?, "return_documents": false,
"truncate": true}. Response: {"model", "results": [{"index", "relevance_score", "document"?: {"text"}}] best first
(ties: the earlier document), "usage": {"prompt_tokens", "total_tokens", "truncated_documents"}}. A pair longer than
the model's max length loses the end of its document (counted in usage.truncated_documents), or with "truncate": false
is a 400. Errors are the OpenAI-style ones of protocol.ApiError. The pairs are scored on the reranker's engine thread,
merged with other requests' pairs into the same token-budget batches as embeddings are (scheduler.py).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from embedpipe.pipeline.batching.rerank import Scored
from embedpipe.pipeline.serve.config import ServedReranker
from embedpipe.pipeline.serve.protocol import ApiError, Limits, dumps, optional_str, parse_json, served_name, usage
from embedpipe.pipeline.serve.timing import RequestTimes
from embedpipe.pipeline.text.pairs import PairError, PairTokenizer, make_pair_tokenizer

INLINE_PAIR_CHARS = 256  # a query and its documents up to this many characters are tokenised on the event loop


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: list[str]
    top_n: int | None  # None: every document
    return_documents: bool
    truncate: bool
    model: str | None  # None: not given


def parse_rerank(body: bytes, limits: Limits) -> RerankRequest:
    """The checked request; at most limits.max_inputs documents (--max-inputs), none empty."""
    payload = parse_json(body)
    query = payload.get("query")
    if not isinstance(query, str) or not query:
        raise ApiError(400, "query is required: a non-empty string", "query")
    top_n = payload.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise ApiError(400, f"top_n must be a positive integer, not {top_n!r}", "top_n")
    return RerankRequest(query, _documents(payload.get("documents"), limits.max_inputs), top_n,
                         _flag(payload, "return_documents", False), _flag(payload, "truncate", limits.truncate),
                         optional_str(payload, "model"))


def _documents(value, max_documents: int) -> list[str]:
    """The texts of `documents`: strings, or Jina's / Cohere v1's {"text": str} objects."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, "documents is required: a non-empty list of strings", "documents")
    if len(value) > max_documents:
        raise ApiError(400, f"documents has {len(value)} items; at most {max_documents} per request", "documents")
    texts = [item.get("text") if isinstance(item, dict) else item for item in value]
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ApiError(400, f"documents[{i}] must be a string or {{\"text\": string}}", "documents")
        if not text:
            raise ApiError(400, f"documents[{i}] is an empty string", "documents")
    return texts


def _flag(payload: dict, name: str, default: bool) -> bool:
    value = payload.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false, not {value!r}", name)
    return value


def rerank_response(scored: Scored, req: RerankRequest, model: str, num_tokens: int) -> bytes:
    results = []
    for hit in scored.ranked(req.top_n):
        result = {"index": hit["index"], "relevance_score": hit["score"]}
        if req.return_documents:
            result["document"] = {"text": req.documents[hit["index"]]}
        results.append(result)
    return dumps({"model": model, "results": results,
                  "usage": {**usage(num_tokens), "truncated_documents": scored.num_truncated}})


class RerankEndpoint:
    """/v1/rerank of one HTTP process: the reranker's pair tokenizer, its names, and the way to its engine."""

    def __init__(self, reranker: ServedReranker, limits: Limits, pool, metrics):
        self.tokenizer: PairTokenizer = make_pair_tokenizer(reranker)
        self.names = (reranker.name,)
        self.limits, self.pool, self.metrics = limits, pool, metrics

    async def answer(self, body: bytes, times: RequestTimes, backend) -> bytes:
        """The response bytes; backend.rerank(ids, types) -> (scores [n] float32, (queue, inference) seconds)."""
        start = time.perf_counter()
        req = parse_rerank(body, self.limits)
        name = served_name(req.model, self.names)
        times.parse, start = time.perf_counter() - start, time.perf_counter()
        pairs = await self._encode(req)
        times.tokenize = time.perf_counter() - start
        times.num_chars = len(req.query) * len(req.documents) + sum(map(len, req.documents))
        scores, (times.queue, times.inference) = await backend.rerank(pairs.ids, pairs.types)
        start = time.perf_counter()
        times.num_tokens = sum(map(len, pairs.ids))
        self.metrics.counted(len(pairs.ids), times.num_tokens)
        scored = Scored(scores, np.argsort(-scores, kind="stable"), pairs.num_truncated)
        body = rerank_response(scored, req, name, times.num_tokens)
        times.encode = time.perf_counter() - start
        return body

    async def _encode(self, req: RerankRequest):
        """EncodedPairs of the request, on the pool unless it is short (as app.EmbedServer._tokenize does)."""
        try:
            if len(req.query) + sum(map(len, req.documents)) <= INLINE_PAIR_CHARS:
                return self.tokenizer.encode(req.query, req.documents, req.truncate)
            return await asyncio.get_running_loop().run_in_executor(
                self.pool, self.tokenizer.encode, req.query, req.documents, req.truncate)
        except PairError as error:  # an over-long pair (truncate off), or a query that leaves a document no room
            message = str(error)
            raise ApiError(400, message, "query" if message.startswith("the query") else "documents") from None
