"""Token-budget batcher over arrays: whole chunks of tokenized rows in, packed batches out.

The same first-in first-out rule as TokenBudgetBatcher (pipeline/batching/batcher.py), cut with numpy:
a batch takes the longest run of queued sequences whose PADDED token count fits the budget and
whose count fits max_batch_seqs; a single sequence longer than the budget is a batch of its own.
Because the budget is a multiple of the policy's large token step (BatcherConfig checks it),
pad_tokens(n) <= budget exactly when n <= budget, so the cut is one searchsorted over the running
sum of real lengths. Python work is O(1) per batch and per chunk, never per sequence: the queue
holds a chunk's token ids [num_tokens] int32 and lengths [num_rows] int32 as they came.

Late chunking adds a second level: each sequence (a document) carries spans (its windows), queued as
relative [start, end) bounds with a count per sequence, and a batch's Batch.span_bounds are made
absolute with numpy too. Every chunk of one batcher has spans, or none does.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch

from embedpipe.kernels.batch import Batch

from embedpipe.pipeline.batching.batcher import BatcherConfig, BatchStats


@dataclass(frozen=True)
class Span:
    """Rows [first, first + count) of the chunk tagged `tag`, consecutive in a batch."""

    tag: Any
    first: int
    count: int


class RowSpans:
    """A batch's tags: its sequences as runs of chunk rows. `spans[i]` is (tag, row) of sequence i;
    a slice of sequence positions is a RowSpans again (the OOM split halves a batch this way)."""

    def __init__(self, spans: list[Span]):
        self.spans = spans

    def __len__(self) -> int:
        return sum(span.count for span in self.spans)

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans)

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("RowSpans slices have step 1")
            return RowSpans(self._cut(start, stop))
        for span in self.spans:
            if index < span.count:
                return span.tag, span.first + index
            index -= span.count
        raise IndexError("sequence index out of range")

    def _cut(self, start: int, stop: int) -> list[Span]:
        cut, offset = [], 0
        for span in self.spans:
            lo, hi = max(start, offset), min(stop, offset + span.count)
            if lo < hi:
                cut.append(Span(span.tag, span.first + lo - offset, hi - lo))
            offset += span.count
        return cut


class ArrayBatcher:
    """Queues chunks of sequences and hands them back, in order, as packed batches within the budget."""

    def __init__(self, config: BatcherConfig = BatcherConfig(), pad_token_id: int = 0):
        self.config = config
        self.pad_token_id = pad_token_id
        self.stats = BatchStats()  # cumulative over the batches handed out
        self._new: list[tuple[np.ndarray, np.ndarray]] = []  # (token ids, lengths) added since the last cut
        self._tokens = np.empty(0, np.int32)  # queued token ids, end to end
        self._lengths = np.empty(0, np.int32)  # [queued sequences]
        self._ends = np.empty(0, np.int64)  # running sum of _lengths
        self._head = 0  # sequences of _ends already handed out
        self._chunks: deque[list] = deque()  # [tag, first row not handed out, rows left], oldest first
        self.spans: bool | None = None  # whether the chunks carry spans: set by the first add
        self._new_spans: list[tuple[np.ndarray, np.ndarray]] = []  # (bounds, counts) added since the last cut
        self._bounds = np.empty((0, 2), np.int32)  # queued spans [num_spans, 2], relative to their sequence
        self._span_ends = np.empty(0, np.int64)  # [queued sequences]: running sum of spans per sequence

    def __len__(self) -> int:
        """Sequences queued, not yet handed out."""
        return len(self._ends) - self._head + sum(len(lengths) for _, lengths in self._new)

    def add(self, token_ids: np.ndarray, lengths: np.ndarray, tag: Any = None,
            spans: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Queues a chunk: token_ids [sum(lengths)] and lengths [num_rows]; batches' tags name its rows.
        spans (late chunking): bounds [num_spans, 2] int32, [start, end) within their sequence, and
        counts [num_rows] int32 (each >= 1), the spans of each sequence in order."""
        if not len(lengths):
            return
        if lengths.min() <= 0:
            raise ValueError("cannot batch an empty sequence")
        if int(lengths.sum(dtype=np.int64)) != len(token_ids):
            raise ValueError("token_ids must hold sum(lengths) ids")
        if self.spans is None:
            self.spans = spans is not None
        if self.spans != (spans is not None):
            raise ValueError("every chunk of a batcher has spans, or none does")
        if spans is not None:
            self._new_spans.append(checked_spans(*spans, lengths))
        self._new.append((token_ids, lengths))
        self._chunks.append([tag, 0, len(lengths)])

    def next_batch(self, flush: bool = False) -> Batch | None:
        """The next full batch; with flush, whatever is queued. None when there is none."""
        self._take_new()
        num_queued = len(self._ends)
        if self._head == num_queued:
            return None
        end, closed = self._cut(num_queued)
        if not (closed or flush):
            return None
        return self._pack(end)

    def _cut(self, num_queued: int) -> tuple[int, bool]:
        """The end (exclusive) of the batch starting at the head, and whether it can no longer grow."""
        budget, max_seqs = self.config.max_batch_tokens, self.config.max_batch_seqs
        base = self._ends[self._head - 1] if self._head else 0
        end = int(np.searchsorted(self._ends, base + budget, side="right"))
        end = max(min(end, self._head + max_seqs), self._head + 1)  # an over-long sequence goes alone
        full = end - self._head == max_seqs or self._ends[end - 1] - base >= budget
        return end, full or end < num_queued

    def _pack(self, end: int) -> Batch:
        head, policy = self._head, self.config.policy
        base = int(self._ends[head - 1]) if head else 0
        num_seqs, num_tokens = end - head, int(self._ends[end - 1]) - base
        padded_tokens, padded_seqs = policy.pad_tokens(num_tokens), policy.pad_seqs(num_seqs)
        ids = np.full(padded_tokens, self.pad_token_id, dtype=np.int64)
        ids[:num_tokens] = self._tokens[base:base + num_tokens]
        cu = np.full(padded_seqs + 1, padded_tokens, dtype=np.int32)
        cu[0] = 0
        cu[1:num_seqs + 1] = self._ends[head:end] - base
        span_bounds = self._span_bounds(head, end, cu[:num_seqs]) if self.spans else None
        self._head = end
        batch = Batch.of_arrays(ids, cu, num_seqs, num_tokens, self._spans(num_seqs), span_bounds)
        self.stats = self.stats + BatchStats.of(batch)
        return batch

    def _span_bounds(self, head: int, end: int, starts: np.ndarray) -> torch.Tensor:
        """The spans of queued sequences [head, end) as [num_spans, 2] int32 offsets into the batch's ids
        (starts: each sequence's first token in the batch)."""
        first = int(self._span_ends[head - 1]) if head else 0
        counts = np.diff(self._span_ends[head:end], prepend=first)
        owners = np.repeat(np.arange(end - head), counts)
        bounds = self._bounds[first:int(self._span_ends[end - 1])] + starts[owners, None]
        return torch.from_numpy(bounds.astype(np.int32))

    def _spans(self, num_seqs: int) -> RowSpans:
        """Takes num_seqs rows off the oldest chunks: O(chunks in the batch)."""
        spans = []
        while num_seqs:
            chunk = self._chunks[0]
            count = min(num_seqs, chunk[2])
            spans.append(Span(chunk[0], chunk[1], count))
            chunk[1] += count
            chunk[2] -= count
            num_seqs -= count
            if not chunk[2]:
                self._chunks.popleft()
        return RowSpans(spans)

    def _take_new(self) -> None:
        """Moves the chunks added since the last cut into the queue, dropping what was handed out."""
        if not self._new:
            return
        base = int(self._ends[self._head - 1]) if self._head else 0
        self._tokens = np.concatenate([self._tokens[base:], *(ids for ids, _ in self._new)])
        self._lengths = np.concatenate([self._lengths[self._head:], *(lengths for _, lengths in self._new)])
        self._ends = np.cumsum(self._lengths, dtype=np.int64)
        if self.spans:
            first = int(self._span_ends[self._head - 1]) if self._head else 0
            counts = np.concatenate([np.diff(self._span_ends[self._head:], prepend=first),
                                     *(counts for _, counts in self._new_spans)])
            self._bounds = np.concatenate([self._bounds[first:], *(bounds for bounds, _ in self._new_spans)])
            self._span_ends, self._new_spans = np.cumsum(counts, dtype=np.int64), []
        self._head, self._new = 0, []


def checked_spans(bounds: np.ndarray, counts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Raises ValueError unless every sequence has spans and each span is non-empty and inside its sequence."""
    bounds, counts = np.asarray(bounds, np.int32).reshape(-1, 2), np.asarray(counts, np.int64)
    if len(counts) != len(lengths) or counts.min() < 1 or int(counts.sum()) != len(bounds):
        raise ValueError("spans: counts must give each sequence at least one span, and sum to the spans given")
    owner_lengths = np.repeat(lengths, counts)
    if ((bounds[:, 0] < 0) | (bounds[:, 1] <= bounds[:, 0]) | (bounds[:, 1] > owner_lengths)).any():
        raise ValueError("spans: every span must be non-empty and inside its sequence")
    return bounds, counts
