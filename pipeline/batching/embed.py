"""Embedding a list of texts or token-id sequences in one process: `embed`, `query` and the server's warm-up."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from embedpipe.kernels.engine import Engine
from embedpipe.pipeline.batching.array_batcher import ArrayBatcher
from embedpipe.pipeline.batching.batcher import BatcherConfig, TokenBudgetBatcher
from embedpipe.pipeline.batching.in_flight import InFlight
from embedpipe.pipeline.text.chunking import CutTexts, WindowCutter
from embedpipe.pipeline.text.late_chunking import LateChunker
from embedpipe.pipeline.text.tokenizer import TextTokenizer


def embed_token_ids(engine: Engine, sequences: list[list[int]], batching: BatcherConfig = BatcherConfig(),
                    token_types: list[list[int]] | None = None) -> np.ndarray:
    """[len(sequences), engine.output.width] in the output dtype, in input order (a reranker's engine: [n, 1]
    scores). token_types: a type per token of each sequence, for a model that takes them."""
    return embed_token_chunks(engine, [(sequences, token_types)], len(sequences), batching)


def embed_token_chunks(engine: Engine, chunks: Iterable[tuple[list[list[int]], list[list[int]] | None]],
                       num_sequences: int, batching: BatcherConfig = BatcherConfig()) -> np.ndarray:
    """embed_token_ids over sequences that come in chunks of (sequences, token types or None), num_sequences in
    all. A chunk is launched (as one batch, or more past the budget) as soon as it is made, so the engine runs
    chunk k while the caller makes chunk k+1 (a generator tokenizing them)."""
    out = np.empty((num_sequences, engine.output.width), dtype=engine.output.numpy_dtype)
    batcher = TokenBudgetBatcher(batching)
    in_flight = InFlight(engine, batching.policy, batcher.pad_token_id, lambda i: f"text {i}")

    def consume(batch, rows) -> None:
        out[batch.tags] = rows.numpy()

    first = 0
    try:
        for sequences, token_types in chunks:
            if first + len(sequences) > num_sequences:
                raise ValueError(f"the chunks hold more than {num_sequences} sequences")
            for i, ids in enumerate(sequences):
                batcher.add(ids, first + i, None if token_types is None else token_types[i])
            while (batch := batcher.next_batch(flush=True)) is not None:
                in_flight.submit(batch, consume)
            first += len(sequences)
    except BaseException:
        in_flight.drain_after_error()
        raise
    in_flight.drain()
    if first != num_sequences:
        raise ValueError(f"the chunks held {first} sequences, not {num_sequences}")
    return out


def embed_texts(engine: Engine, tokenizer: TextTokenizer, texts: list[str]) -> np.ndarray:
    ids, _ = tokenizer.encode(texts)
    return embed_token_ids(engine, ids)


def embed_windows(engine: Engine, cutter: WindowCutter | LateChunker, texts: list[str],
                  batching: BatcherConfig = BatcherConfig()) -> tuple[np.ndarray, CutTexts]:
    """The texts cut into windows: their vectors [num_windows, width], in order, and where each window is."""
    cut = cutter.cut(texts)
    return embed_cut(engine, cut, batching), cut


def embed_cut(engine: Engine, cut: CutTexts, batching: BatcherConfig = BatcherConfig()) -> np.ndarray:
    """cut's sequences through the engine, as the index job batches them (ArrayBatcher): [num_windows, width], in
    order. A sequence is a window, or with late chunking (cut.spans) a document pooled by window; batches, and an
    out-of-memory split's halves, are read first in, first out, so the rows arrive in order."""
    out = np.empty((len(cut.rows), engine.output.width), dtype=engine.output.numpy_dtype)
    batcher, filled = ArrayBatcher(batching), 0
    in_flight = InFlight(engine, batching.policy, batcher.pad_token_id, lambda tag: f"sequence {tag[1]}")

    def consume(batch, rows):
        nonlocal filled
        out[filled:filled + batch.num_rows] = rows.numpy()
        filled += batch.num_rows

    batcher.add(cut.token_ids, cut.lengths, None, cut.spans)
    while (batch := batcher.next_batch(flush=True)) is not None:
        in_flight.submit(batch, consume)
    in_flight.drain()
    return out
