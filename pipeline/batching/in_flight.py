"""The one driver of `Engine.step`: batches launched and not yet read, oldest first, split on out-of-memory.

The index runner, the server's scheduler and `embed` all launch through it. Each batch carries its
`consume(batch, rows)`, called in launch order with the batch's embeddings [num_seqs, width] in the
engine's pinned buffer (LazyTensor.read: consume copies what it keeps); a batch that runs out of
memory is consumed as its halves, each with its own tags (SplitOnOutOfMemory). With N batches in
flight the CPU packs and launches batch N+1 while the device runs the ones before it (TEI's
infer.rs, Perplexity's LazyTensor); the engine's CUDA runner keeps a pinned slot for each of its
`max_in_flight` batches and one more.
"""
from __future__ import annotations

import contextlib
from collections import deque
from typing import Any, Callable

import torch

from embedpipe.kernels.batch import Batch, BucketPolicy
from embedpipe.kernels.lazy_tensor import LazyTensor
from embedpipe.pipeline.batching.oom_split import SplitOnOutOfMemory

Consume = Callable[[Batch, torch.Tensor], Any]


class InFlight:
    """Up to max_in_flight (default: the engine's) batches in flight on one engine; see the module docstring.

    describe(tag) names a sequence for the error raised when one alone does not fit in memory.
    """

    def __init__(self, engine, policy: BucketPolicy, pad_token_id: int = 0, describe: Callable[[Any], str] = repr,
                 max_in_flight: int | None = None):
        self.max_in_flight = max_in_flight if max_in_flight is not None else engine.max_in_flight
        if not 1 <= self.max_in_flight <= engine.max_in_flight:
            raise ValueError(f"max_in_flight must be between 1 and the engine's {engine.max_in_flight} "
                             f"(EngineConfig.max_in_flight), not {self.max_in_flight}")
        self.oom = SplitOnOutOfMemory(engine, policy, pad_token_id, describe)
        self._queue: deque[tuple[Batch, LazyTensor, Consume]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.max_in_flight

    @property
    def num_splits(self) -> int:
        """Batches that ran out of memory and ran as halves."""
        return self.oom.num_splits

    @property
    def oldest(self) -> Batch:
        return self._queue[0][0]

    def oldest_done(self) -> bool:
        """Whether the oldest batch's rows are on the host (reading it will not wait)."""
        return self._queue[0][1].done()

    def submit(self, batch: Batch, consume: Consume) -> None:
        """Launches the batch, then reads the oldest while max_in_flight are in flight (batch N is read
        once N+1 .. N+max_in_flight-1 are queued behind it). When the launch fails, the batches before it
        are read first (their rows are consumed and kept), then the error is raised."""
        try:
            self.launch(batch, consume)
        except BaseException:
            self.drain()
            raise
        while self.full:
            self.read_oldest()

    def launch(self, batch: Batch, consume: Consume) -> None:
        """Launches the batch without reading any (the server's scheduler reads when it chooses)."""
        self._queue.append((batch, self.oom.step(batch), consume))

    def read_oldest(self) -> Batch:
        """Waits for the oldest batch and consumes its rows; returns it. Its error (after an out-of-memory
        split, that of a text too large alone) is raised here, and the batch has left the queue."""
        batch, handle, consume = self._queue.popleft()
        self.oom.read(batch, handle, consume)
        return batch

    def drain(self) -> None:
        """Reads every batch in flight, oldest first."""
        while self._queue:
            self.read_oldest()

    def drain_after_error(self) -> None:
        """Reads every batch in flight, oldest first, dropping their own errors: while an error is being raised,
        no launch is left unread and the error raised stays the first one."""
        while self._queue:
            with contextlib.suppress(Exception):
                self.read_oldest()
