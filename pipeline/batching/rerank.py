"""Scoring a query's documents with a reranker's engine (EngineConfig(task="score")) in one process: `rerank`,
`query --rerank` and embedpipe.Reranker. The pairs go through the same token-budget batches as embeddings do
(embed_token_ids), so how they are packed does not change a score."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from embedpipe.kernels.engine import Engine
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_chunks, embed_token_ids
from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.text.pairs import EncodedPairs, PairTokenizer


# A query's documents are tokenized a chunk at a time while the engine scores the chunk before: tokenizing 50 pairs
# of 512 tokens took 9 ms on the H200's 16 cores and BERT-base scoring them 13 ms, so only overlap hides it. A chunk
# holds ~CHUNK_TOKENS tokens (a full batch for the GPU) and at least a document per CPU: the tokenizer runs a
# chunk's documents in parallel, one per thread, and 8-document chunks took 2.9 ms each, a third of all 50
# (scratch profile, 2026-12-02)
CHUNK_TOKENS = 4096
CHARS_PER_TOKEN = 4  # English prose, to size a chunk before tokenizing it


class TooManyDocuments(UserError, ValueError):
    """A request with more documents than its limit."""


@dataclass(frozen=True)
class Scored:
    """scores [num_documents] float32 in document order; order: the document indices, best first (ties: the
    earlier document first); num_truncated: documents cut to the model's max length."""

    scores: np.ndarray
    order: np.ndarray
    num_truncated: int

    def ranked(self, top_n: int | None = None) -> list[dict]:
        """[{"index", "score"}] best first, at most top_n of them."""
        return [{"index": int(i), "score": float(self.scores[i])} for i in self.order[:top_n]]


def score_pairs(engine: Engine, pairs: EncodedPairs, batching: BatcherConfig = BatcherConfig()) -> np.ndarray:
    """[len(pairs.ids)] float32: the engine's score of each pair, in order."""
    if not pairs.ids:
        return np.empty(0, dtype=np.float32)
    return embed_token_ids(engine, pairs.ids, batching, pairs.types)[:, 0]


def score_documents(engine: Engine, tokenizer: PairTokenizer, query: str, documents: list[str],
                    batching: BatcherConfig = BatcherConfig(), truncate: bool = True,
                    max_documents: int | None = None) -> Scored:
    """The query's score with each document, and their order. The documents are tokenized a chunk at a time while
    the engine scores the chunk before (embed_token_chunks). Raises TooManyDocuments past max_documents, and
    PairError (a UserError) for an empty query or document, or with truncate=False an over-long pair."""
    if max_documents is not None and len(documents) > max_documents:
        raise TooManyDocuments(f"{len(documents)} documents; at most {max_documents} a query")
    tokenizer.check(query, documents)  # before any chunk is scored; the first chunk's encode checks the query
    if not documents:
        tokenizer.encode(query, [], truncate)  # a query too long for any pair is an error with no documents too
        return Scored(np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64), 0)
    truncated = 0

    def chunks():
        nonlocal truncated
        bounds = chunk_bounds(documents, tokenizer.max_length, min(CHUNK_TOKENS, batching.max_batch_tokens),
                              tokenizer_threads(), tokenizer.min_length - 2)
        for start, end in bounds:
            pairs = tokenizer.encode(query, documents[start:end], truncate, first=start)
            truncated += pairs.num_truncated
            yield pairs.ids, pairs.types

    scores = embed_token_chunks(engine, chunks(), len(documents), batching)[:, 0]
    return Scored(scores, np.argsort(-scores, kind="stable"), truncated)


def tokenizer_threads() -> int:
    """The threads the tokenizer runs a batch of texts on: Rayon's pool, one per CPU this process may use unless
    RAYON_RS_NUM_CPUS (the tokenizers library's setting) says otherwise."""
    if (setting := os.environ.get("RAYON_RS_NUM_CPUS", "")).isdigit() and int(setting) > 0:
        return int(setting)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def chunk_bounds(documents: list[str], max_length: int, chunk_tokens: int, min_documents: int = 1,
                 pair_tokens: int = 0) -> list[tuple[int, int]]:
    """[start, end) runs of documents of about chunk_tokens tokens each and at least min_documents (but the last),
    the tokens of a pair estimated before tokenizing: pair_tokens (the query's, the template's) + the document's
    characters / CHARS_PER_TOKEN, at most max_length."""
    bounds, start, tokens = [], 0, 0
    for i, document in enumerate(documents):
        estimate = min(max_length, pair_tokens + len(document) // CHARS_PER_TOKEN + 1)
        if i - start >= max(1, min_documents) and tokens + estimate > chunk_tokens:
            bounds.append((start, i))
            start, tokens = i, 0
        tokens += estimate
    if start < len(documents):
        bounds.append((start, len(documents)))
    return bounds
