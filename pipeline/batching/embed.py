"""Embedding a list of texts or token-id sequences in one process: `embed`, `query` and the server's warm-up."""
from __future__ import annotations

import numpy as np

from embedpipe.kernels.engine import Engine
from embedpipe.pipeline.batching.batcher import BatcherConfig, TokenBudgetBatcher
from embedpipe.pipeline.batching.in_flight import InFlight
from embedpipe.pipeline.text.tokenizer import TextTokenizer


def embed_token_ids(engine: Engine, sequences: list[list[int]], batching: BatcherConfig = BatcherConfig()) -> np.ndarray:
    """[len(sequences), engine.output.width] in the output dtype, in input order."""
    out = np.empty((len(sequences), engine.output.width), dtype=engine.output.numpy_dtype)
    batcher = TokenBudgetBatcher(batching)
    in_flight = InFlight(engine, batching.policy, batcher.pad_token_id, lambda i: f"text {i}")

    def consume(batch, rows) -> None:
        out[batch.tags] = rows.numpy()

    for i, ids in enumerate(sequences):
        batcher.add(ids, i)
        while (batch := batcher.next_batch(flush=False)) is not None:
            in_flight.submit(batch, consume)
    while (batch := batcher.next_batch(flush=True)) is not None:
        in_flight.submit(batch, consume)
    in_flight.drain()
    return out


def embed_texts(engine: Engine, tokenizer: TextTokenizer, texts: list[str]) -> np.ndarray:
    ids, _ = tokenizer.encode(texts)
    return embed_token_ids(engine, ids)
