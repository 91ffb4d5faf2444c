"""ArrayBatcher: the same batches as TokenBudgetBatcher (cuts, graph keys, ids, row order), from whole chunks."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedpipe.kernels.batch import BucketPolicy, split_in_halves
from embedpipe.pipeline.batching.batcher import BatcherConfig, TokenBudgetBatcher
from embedpipe.pipeline.batching.array_batcher import ArrayBatcher, RowSpans, Span


def chunks_of(lengths: list[int], sizes: list[int], rng: np.random.Generator):
    """(token_ids, lengths, first row) per chunk: random ids, the rows cut into chunks of `sizes` (cycled)."""
    ids = rng.integers(1, 30000, int(sum(lengths)), dtype=np.int32)
    ends = np.cumsum(lengths)
    row, k = 0, 0
    while row < len(lengths):
        size = min(sizes[k % len(sizes)], len(lengths) - row)
        start = int(ends[row - 1]) if row else 0
        yield ids[start:int(ends[row + size - 1])], np.asarray(lengths[row:row + size], np.int32), row
        row, k = row + size, k + 1


def both_batchers(config: BatcherConfig, lengths: list[int], sizes: list[int], flushes: list[bool], seed: int):
    """The batches each batcher hands out when fed the same rows, one by one / chunk by chunk."""
    reference, batcher = TokenBudgetBatcher(config), ArrayBatcher(config)
    ours, theirs = [], []
    for k, (token_ids, chunk_lengths, first) in enumerate(chunks_of(lengths, sizes, np.random.default_rng(seed))):
        ends = np.cumsum(chunk_lengths)
        for i, end in enumerate(ends):
            reference.add(token_ids[end - chunk_lengths[i]:end].tolist(), first + i)
        batcher.add(token_ids, chunk_lengths, first)
        flush = flushes[k % len(flushes)]
        while (batch := reference.next_batch(flush)) is not None:
            theirs.append(batch)
        while (batch := batcher.next_batch(flush)) is not None:
            ours.append(batch)
    while (batch := reference.next_batch(True)) is not None:
        theirs.append(batch)
    while (batch := batcher.next_batch(True)) is not None:
        ours.append(batch)
    return ours, theirs, batcher, reference


def rows_of(spans: RowSpans) -> list[int]:
    return [span.tag + row for span in spans for row in range(span.first, span.first + span.count)]


@settings(max_examples=300, deadline=None)
@given(budget=st.sampled_from([256, 512, 2048, 4096, 16384]), max_seqs=st.integers(1, 80),
       lengths=st.lists(st.integers(1, 9000), min_size=1, max_size=300),
       sizes=st.lists(st.integers(1, 60), min_size=1, max_size=5),
       flushes=st.lists(st.booleans(), min_size=1, max_size=4), seed=st.integers(0, 1000))
def test_cuts_keys_ids_and_rows_equal_the_token_budget_batchers(budget, max_seqs, lengths, sizes, flushes, seed):
    config = BatcherConfig(budget, max_seqs)
    ours, theirs, batcher, reference = both_batchers(config, lengths, sizes, flushes, seed)
    assert [b.key for b in ours] == [b.key for b in theirs]
    for mine, its in zip(ours, theirs):
        assert (mine.num_seqs, mine.num_tokens) == (its.num_seqs, its.num_tokens)
        assert mine.input_ids.tolist() == its.input_ids.tolist()
        assert mine.cu_seqlens.tolist() == its.cu_seqlens.tolist()
        assert rows_of(mine.tags) == its.tags
    assert batcher.stats == reference.stats and len(batcher) == len(reference) == 0


def test_realistic_lengths_in_realistic_chunks_equal_the_token_budget_batchers():
    """A corpus's log-normal lengths (median 64, cut to [20, 512]) in chunks of 1024 rows, the index job's shape."""
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(64), 0.8, 20_000).round(), 20, 512).astype(int).tolist()
    ours, theirs, _, _ = both_batchers(BatcherConfig(16384, 512), lengths, [1024], [False], seed=1)
    assert len(ours) == len(theirs) > 100
    assert all(a.key == b.key and rows_of(a.tags) == b.tags for a, b in zip(ours, theirs))


def test_spans_index_and_slice_like_a_list_of_rows():
    spans = RowSpans([Span("a", 5, 3), Span("b", 0, 2), Span("c", 7, 1)])
    rows = [("a", 5), ("a", 6), ("a", 7), ("b", 0), ("b", 1), ("c", 7)]
    assert len(spans) == 6 and [spans[i] for i in range(6)] == rows
    for start in range(7):
        for stop in range(start, 7):
            part = spans[start:stop]
            assert [part[i] for i in range(len(part))] == rows[start:stop]
    with pytest.raises(IndexError):
        spans[6]


def test_an_out_of_memory_split_keeps_each_halfs_rows():
    batcher = ArrayBatcher(BatcherConfig(4096, 64))
    batcher.add(np.arange(1, 1 + 30 * 7, dtype=np.int32), np.full(30, 7, np.int32), "first")
    batcher.add(np.arange(1, 1 + 5 * 3, dtype=np.int32), np.full(5, 3, np.int32), "second")
    batch = batcher.next_batch(flush=True)
    first, second = split_in_halves(batch, BucketPolicy())
    assert [first.tags[i] for i in range(first.num_seqs)] == [("first", i) for i in range(17)]
    assert [second.tags[i] for i in range(second.num_seqs)] == ([("first", i) for i in range(17, 30)]
                                                                 + [("second", i) for i in range(5)])


def test_rejects_empty_sequences_and_mismatched_ids():
    batcher = ArrayBatcher()
    with pytest.raises(ValueError, match="empty sequence"):
        batcher.add(np.arange(3, dtype=np.int32), np.array([3, 0], np.int32))
    with pytest.raises(ValueError, match="sum"):
        batcher.add(np.arange(3, dtype=np.int32), np.array([2, 2], np.int32))
    batcher.add(np.empty(0, np.int32), np.empty(0, np.int32))  # an empty chunk adds nothing
    assert len(batcher) == 0 and batcher.next_batch(flush=True) is None


def test_work_per_batch_does_not_grow_with_the_rows_queued():
    """Whole chunks in: 600k rows in chunks of 1024 take well under a second of Python (TokenBudgetBatcher: ~10 s)."""
    batcher = ArrayBatcher(BatcherConfig(16384, 512))
    lengths = np.full(1024, 20, np.int32)
    ids = np.ones(1024 * 20, np.int32)
    start, rows = time.perf_counter(), 0
    for _ in range(600):
        batcher.add(ids, lengths)
        while (batch := batcher.next_batch()) is not None:
            rows += batch.num_seqs
    while (batch := batcher.next_batch(flush=True)) is not None:
        rows += batch.num_seqs
    assert rows == 600 * 1024
    assert time.perf_counter() - start < 5  # generous for a loaded 2-core CI machine


def random_spans(lengths: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """1-3 random non-empty spans per sequence (they may overlap), relative to it."""
    counts = rng.integers(1, 4, len(lengths))
    starts = np.concatenate([rng.integers(0, n, c) for n, c in zip(lengths, counts)])
    owner_lengths = np.repeat(lengths, counts)
    ends = starts + 1 + (rng.integers(0, 1 << 30, len(starts)) % (owner_lengths - starts))
    return np.stack([starts, ends], 1).astype(np.int32), counts.astype(np.int32)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 700), min_size=1, max_size=120), st.lists(st.integers(1, 30), min_size=1, max_size=4),
       st.lists(st.booleans(), min_size=1, max_size=3), st.integers(0, 1000))
def test_spans_follow_their_sequences_into_every_batch(lengths, sizes, flushes, seed):
    """Late chunking: each batch's span_bounds are its sequences' spans, made absolute, in order; so are
    an out-of-memory split's halves."""
    rng = np.random.default_rng(seed)
    batcher, expected, got = ArrayBatcher(BatcherConfig(max_batch_tokens=2048, max_batch_seqs=16)), [], []
    for k, (token_ids, chunk_lengths, first) in enumerate(chunks_of(lengths, sizes, rng)):
        bounds, counts = random_spans(chunk_lengths, rng)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        expected += [bounds[offsets[i]:offsets[i + 1]].tolist() for i in range(len(chunk_lengths))]
        batcher.add(token_ids, chunk_lengths, first, spans=(bounds, counts))
        while (batch := batcher.next_batch(flushes[k % len(flushes)])) is not None:
            got.append(batch)
    while (batch := batcher.next_batch(True)) is not None:
        got.append(batch)
    relative = [[list(span) for span in seq] for batch in got for seq in batch.relative_spans()]
    assert relative == expected
    assert sum(batch.num_rows for batch in got) == sum(map(len, expected))
    for batch in (b for b in got if b.num_seqs >= 2):
        halves = split_in_halves(batch, BatcherConfig().policy)
        assert [s for half in halves for s in half.relative_spans()] == batch.relative_spans()


def test_a_batcher_takes_spans_for_every_chunk_or_none():
    batcher = ArrayBatcher()
    batcher.add(np.ones(5, np.int32), np.array([2, 3], np.int32), spans=(np.array([[0, 2], [1, 3]]), np.array([1, 1])))
    with pytest.raises(ValueError, match="spans, or none"):
        batcher.add(np.ones(2, np.int32), np.array([2], np.int32))
    with pytest.raises(ValueError, match="inside its sequence"):
        batcher.add(np.ones(2, np.int32), np.array([2], np.int32), spans=(np.array([[0, 3]]), np.array([1])))
    with pytest.raises(ValueError, match="at least one span"):
        batcher.add(np.ones(2, np.int32), np.array([2], np.int32), spans=(np.empty((0, 2)), np.array([0])))
