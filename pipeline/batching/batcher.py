"""Token-budget batcher: cuts tokenized sequences, first in first out, into packed batches.

Follows TEI's core/src/queue.rs: check the budget before adding a sequence, leave the one
that overflows for the next batch, cap the sequence count. The budget applies to the PADDED
token count (the first part of the CUDA-graph key), so every batch fits the largest captured graph, except a
single sequence longer than the budget, which forms a batch of its own (run eagerly).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from embedpipe.kernels.batch import Batch, BucketPolicy, pack


@dataclass(frozen=True)
class BatcherConfig:
    """Limits of one batch: padded tokens <= max_batch_tokens, sequences <= max_batch_seqs."""

    max_batch_tokens: int = 16384
    max_batch_seqs: int = 512
    policy: BucketPolicy = BucketPolicy()

    def __post_init__(self):
        step = self.policy.large_token_step
        if self.max_batch_tokens <= 0 or self.max_batch_tokens % step:
            # a budget off the bucket grid could never be filled exactly
            raise ValueError(f"max_batch_tokens must be a positive multiple of {step}")
        if not 1 <= self.max_batch_seqs <= self.policy.max_seqs:
            raise ValueError(f"max_batch_seqs must be in [1, {self.policy.max_seqs}] (the policy's largest bucket)")


@dataclass(frozen=True)
class BatchStats:
    """Counts over one or more batches; add two with `+`, take an earlier count from a later one with `-`."""

    batches: int = 0
    sequences: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0

    @classmethod
    def of(cls, batch: Batch) -> BatchStats:
        return cls(1, batch.num_seqs, batch.num_tokens, batch.key[0])

    def __add__(self, other: BatchStats) -> BatchStats:
        return BatchStats(self.batches + other.batches, self.sequences + other.sequences,
                          self.real_tokens + other.real_tokens, self.padded_tokens + other.padded_tokens)

    def __sub__(self, other: BatchStats) -> BatchStats:
        return BatchStats(self.batches - other.batches, self.sequences - other.sequences,
                          self.real_tokens - other.real_tokens, self.padded_tokens - other.padded_tokens)

    @property
    def padding_waste(self) -> float:
        """Fraction of the padded tokens that are padding."""
        if not self.padded_tokens:
            return 0.0
        return (self.padded_tokens - self.real_tokens) / self.padded_tokens


class TokenBudgetBatcher:
    """Queues sequences and hands them back, in order, as packed batches within the budget.

    The queue is cut into batches as sequences arrive: `_closed_sizes` holds the sizes of the
    batches at its head that can no longer grow; the open batch (`_open_seqs` sequences,
    `_open_tokens` real tokens) is its tail. A sequence is looked at once when added and once
    when packed, so both `add` and `next_batch` are O(1) amortised per sequence.
    """

    def __init__(self, config: BatcherConfig = BatcherConfig(), pad_token_id: int = 0):
        self.config = config
        self.pad_token_id = pad_token_id
        self.stats = BatchStats()  # cumulative over the batches handed out
        self._queue: deque[tuple[Sequence[int], Any, Sequence[int] | None]] = deque()  # (ids, tag, types)
        self._closed_sizes: deque[int] = deque()
        self._open_seqs = 0
        self._open_tokens = 0

    def __len__(self) -> int:
        """Sequences queued, not yet handed out."""
        return len(self._queue)

    def add(self, token_ids: Sequence[int], tag: Any = None, token_types: Sequence[int] | None = None) -> None:
        """Queues one sequence; `tag` comes back in `Batch.tags` at the sequence's position. token_types: a type per
        token (a cross-encoder's pair), given for every sequence of the batcher or for none."""
        length = len(token_ids)
        if length == 0:
            raise ValueError("cannot batch an empty sequence")
        if self._open_seqs and not self._fits(length):
            self._close_open_batch()  # this sequence starts the next batch
        self._queue.append((token_ids, tag, token_types))
        self._open_seqs += 1
        self._open_tokens += length
        if self._open_seqs >= self.config.max_batch_seqs or self._open_tokens >= self.config.max_batch_tokens:
            self._close_open_batch()  # nothing more can join it

    def next_batch(self, flush: bool = False) -> Batch | None:
        """The next full batch; with flush, whatever is queued. None when there is none."""
        if not self._closed_sizes:
            if not (flush and self._open_seqs):
                return None
            self._close_open_batch()
        return self._pack(self._closed_sizes.popleft())

    def _fits(self, length: int) -> bool:
        padded = self.config.policy.pad_tokens(self._open_tokens + length)
        return padded <= self.config.max_batch_tokens

    def _close_open_batch(self) -> None:
        self._closed_sizes.append(self._open_seqs)
        self._open_seqs = 0
        self._open_tokens = 0

    def _pack(self, num_seqs: int) -> Batch:
        items = [self._queue.popleft() for _ in range(num_seqs)]
        types = None if items[0][2] is None else [types for _, _, types in items]
        batch = pack([ids for ids, _, _ in items], self.config.policy, self.pad_token_id, [tag for _, tag, _ in items],
                     token_types=types)
        self.stats = self.stats + BatchStats.of(batch)
        return batch
