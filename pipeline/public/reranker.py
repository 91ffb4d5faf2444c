"""embedpipe.Reranker: a query's documents scored by a reranker, on the engine the embeddings run on.

    reranker = embedpipe.Reranker("models/ms-marco-MiniLM-L6-v2")  # or a Qwen3-Reranker folder
    reranker.rerank("what is ragged attention?", documents, top_n=3)  # [{"index": 2, "score": 0.97}, ...]

Importing it loads no torch: the engine loads with the first Reranker.
"""
from __future__ import annotations

from typing import Sequence


class Reranker:
    """One reranker on one device, loaded once: a cross-encoder folder (BERT or XLM-RoBERTa
    `*ForSequenceClassification`, its sentence-transformers activation applied) or Qwen3-Reranker (a Qwen3ForCausalLM
    folder: P("yes") under the model card's prompt template).

    device: "auto", "cpu", "cuda" or "cuda:N". max_length: tokens a pair (query, document, special tokens and
    template), below the model's max_seq_length. batch_tokens: padded tokens per engine batch (scores do not depend
    on it). instruction: Qwen3-Reranker's task instruction (default: the model card's web-search one).
    Raises UserError for a model, device or setting that cannot be used.
    """

    def __init__(self, model: str, *, device: str = "auto", max_length: int | None = None,
                 batch_tokens: int | None = None, instruction: str | None = None):
        from embedpipe.pipeline.api import TextReranker
        self._reranker = TextReranker(model, device, max_length, batch_tokens, instruction)

    @property
    def max_length(self) -> int:
        return self._reranker.tokenizer.max_length

    def score(self, query: str, documents: Sequence[str], *, truncate: bool = True):
        """numpy [len(documents)] float32: each document's score with the query, in document order. A pair longer
        than max_length loses the end of its document; with truncate=False it raises UserError instead, as it does
        for an empty query or document."""
        return self._reranker.score(query, documents, truncate).scores

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int | None = None,
               truncate: bool = True) -> list[dict]:
        """[{"index", "score"}], best first (ties: the earlier document), at most top_n: `embedpipe rerank`'s lines."""
        return self._reranker.score(query, documents, truncate).ranked(top_n)
