"""Embedding a list of texts in one process: the `embed` and `query` commands."""
from __future__ import annotations

import numpy as np

from embedpipe.kernels.engine import Engine
from embedpipe.pipeline.batching.batcher import BatcherConfig, TokenBudgetBatcher
from embedpipe.pipeline.batching.oom_split import SplitOnOutOfMemory
from embedpipe.pipeline.text.tokenizer import TextTokenizer


def embed_token_ids(engine: Engine, sequences: list[list[int]], batching: BatcherConfig = BatcherConfig()) -> np.ndarray:
    """[len(sequences), engine.output.width] in the output dtype, in input order."""
    out = np.empty((len(sequences), engine.output.width), dtype=engine.output.numpy_dtype)
    batcher = TokenBudgetBatcher(batching)
    device = SplitOnOutOfMemory(engine, batching.policy, batcher.pad_token_id, lambda i: f"text {i}")
    for i, ids in enumerate(sequences):
        batcher.add(ids, i)
        _drain(device, batcher, out, flush=False)
    _drain(device, batcher, out, flush=True)
    return out


def _drain(device: SplitOnOutOfMemory, batcher: TokenBudgetBatcher, out: np.ndarray, flush: bool) -> None:
    while (batch := batcher.next_batch(flush=flush)) is not None:
        out[batch.tags] = device.result(batch, device.step(batch)).numpy()


def embed_texts(engine: Engine, tokenizer: TextTokenizer, texts: list[str]) -> np.ndarray:
    ids, _ = tokenizer.encode(texts)
    return embed_token_ids(engine, ids)
