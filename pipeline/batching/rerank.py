"""Scoring a query's documents with a reranker's engine (EngineConfig(task="score")) in one process: `rerank`,
`query --rerank` and embedpipe.Reranker. The pairs go through the same token-budget batches as embeddings do
(embed_token_ids), so how they are packed does not change a score."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedpipe.kernels.engine import Engine
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_ids
from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.text.pairs import EncodedPairs, PairTokenizer


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
    """The query's score with each document, and their order. Raises TooManyDocuments past max_documents, and
    PairError (a UserError) for an empty query or document, or with truncate=False an over-long pair."""
    if max_documents is not None and len(documents) > max_documents:
        raise TooManyDocuments(f"{len(documents)} documents; at most {max_documents} a query")
    pairs = tokenizer.encode(query, documents, truncate)
    scores = score_pairs(engine, pairs, batching)
    return Scored(scores, np.argsort(-scores, kind="stable"), pairs.num_truncated)
