"""TokenBudgetBatcher: FIFO order, budgets, bucket keys, pack invariants, stats."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedpipe.kernels.batch import Batch, BucketPolicy, pack
from embedpipe.pipeline.batching.batcher import BatcherConfig, BatchStats, TokenBudgetBatcher


def check_bucketed(batch: Batch, policy: BucketPolicy) -> None:
    """The batch's key is on the policy's grid and `pack` laid it out correctly."""
    padded_tokens, padded_seqs = batch.key
    step = policy.small_token_step if batch.num_tokens <= policy.large_token_threshold else policy.large_token_step
    assert padded_tokens % step == 0 and padded_tokens >= batch.num_tokens
    assert padded_tokens - batch.num_tokens < step or padded_tokens == step
    assert padded_seqs in policy.seq_buckets or (padded_seqs == batch.num_seqs + 1 > policy.seq_buckets[-1])
    assert padded_seqs > batch.num_seqs  # room for the padding sequence
    cu = batch.cu_seqlens.tolist()
    assert cu[0] == 0 and all(a <= b for a, b in zip(cu, cu[1:]))
    assert all(cu[i] < cu[i + 1] for i in range(batch.num_seqs))  # real sequences are non-empty
    assert cu[batch.num_seqs] == batch.num_tokens
    assert cu[batch.num_seqs + 1] == padded_tokens == cu[-1]  # the padding sequence owns all padding


def reference_batches(lengths: list[int], config: BatcherConfig) -> list[tuple[int, bool]]:
    """(size, complete) of each batch that greedy first-in-first-out filling forms."""
    out, size, tokens = [], 0, 0

    def complete() -> bool:
        return size >= config.max_batch_seqs or tokens >= config.max_batch_tokens

    for n in lengths:
        if size and (complete() or config.policy.pad_tokens(tokens + n) > config.max_batch_tokens):
            out.append((size, True))
            size, tokens = 0, 0
        size, tokens = size + 1, tokens + n
    if size:
        out.append((size, complete()))
    return out


def check_batch(batch: Batch, lengths: list[int], config: BatcherConfig) -> None:
    check_bucketed(batch, config.policy)
    assert batch.num_seqs <= config.max_batch_seqs
    assert batch.num_tokens == sum(lengths[tag] for tag in batch.tags)
    if batch.num_seqs > 1 or lengths[batch.tags[0]] <= config.max_batch_tokens:
        assert batch.key[0] <= config.max_batch_tokens
    for i, tag in enumerate(batch.tags):  # each sequence's own tokens, in place
        start, end = batch.cu_seqlens[i].item(), batch.cu_seqlens[i + 1].item()
        assert batch.input_ids[start:end].tolist() == token_ids(tag, lengths[tag])


def token_ids(tag: int, length: int) -> list[int]:
    return [1000 + tag] * length  # tells sequences apart after packing


ops = st.lists(st.one_of(st.integers(1, 700), st.just("next")), max_size=150)


@settings(max_examples=200, deadline=None)
@given(ops=ops, budget_steps=st.integers(1, 24), max_seqs=st.integers(1, 40))
def test_batches_are_fifo_within_budget_and_greedy(ops, budget_steps, max_seqs):
    config = BatcherConfig(max_batch_tokens=256 * budget_steps, max_batch_seqs=max_seqs)
    batcher = TokenBudgetBatcher(config, pad_token_id=7)
    lengths: list[int] = []
    emitted: list[Batch] = []
    for op in ops:
        if op == "next":
            queued = lengths[sum(b.num_seqs for b in emitted):]
            expected = reference_batches(queued, config)[:1]
            batch = batcher.next_batch()
            if expected and expected[0][1]:  # a complete batch waits at the head: it comes out whole
                assert batch is not None and batch.num_seqs == expected[0][0]
                emitted.append(batch)
            else:
                assert batch is None
        else:
            batcher.add(token_ids(len(lengths), op), tag=len(lengths))
            lengths.append(op)
    while (batch := batcher.next_batch(flush=True)) is not None:
        emitted.append(batch)

    assert len(batcher) == 0
    assert [tag for b in emitted for tag in b.tags] == list(range(len(lengths)))  # once each, in order
    for batch in emitted:
        check_batch(batch, lengths, config)
    assert [b.num_seqs for b in emitted] == [size for size, _ in reference_batches(lengths, config)]
    total = sum((BatchStats.of(b) for b in emitted), BatchStats())
    assert batcher.stats == total
    assert total == BatchStats(len(emitted), len(lengths), sum(lengths), sum(b.key[0] for b in emitted))
    if emitted:
        padding = sum(b.num_padding_tokens for b in emitted)
        assert batcher.stats.padding_waste == pytest.approx(padding / total.padded_tokens)


def test_overlong_sequence_forms_its_own_batch_at_once():
    batcher = TokenBudgetBatcher(BatcherConfig(max_batch_tokens=512, max_batch_seqs=8))
    batcher.add([5] * 10, tag="short")
    batcher.add([5] * 600, tag="long")  # over the budget: the short one's batch closes
    assert batcher.next_batch().tags == ["short"]
    long_batch = batcher.next_batch()  # complete without waiting for the next sequence
    assert long_batch.tags == ["long"] and long_batch.key == (640, 2)
    assert batcher.next_batch(flush=True) is None


def test_batch_that_reaches_the_budget_exactly_is_complete():
    batcher = TokenBudgetBatcher(BatcherConfig(max_batch_tokens=256, max_batch_seqs=8))
    batcher.add([1] * 200, 0)
    assert batcher.next_batch() is None  # a 56-token sequence could still join
    batcher.add([1] * 56, 1)
    assert batcher.next_batch().key == (256, 4)  # no sequence can join: out without flush


def test_sequence_cap_closes_a_batch():
    batcher = TokenBudgetBatcher(BatcherConfig(max_batch_tokens=16384, max_batch_seqs=3))
    for tag in range(4):
        batcher.add([1, 2], tag)
    assert batcher.next_batch().tags == [0, 1, 2]
    assert batcher.next_batch() is None
    assert batcher.next_batch(flush=True).tags == [3]


def test_stats_report_padding_waste():
    batcher = TokenBudgetBatcher(BatcherConfig(max_batch_tokens=256, max_batch_seqs=4))
    batcher.add([1] * 48, 0)
    batcher.add([1] * 48, 1)
    batch = batcher.next_batch(flush=True)
    assert BatchStats.of(batch) == BatchStats(batches=1, sequences=2, real_tokens=96, padded_tokens=128)
    assert batcher.stats.padding_waste == pytest.approx(32 / 128)
    assert BatchStats().padding_waste == 0.0


def test_pack_beyond_the_last_sequence_bucket():
    policy = BucketPolicy(seq_buckets=(2, 4))
    batch = pack([[1]] * 5, policy)
    assert batch.key == (64, 6)
    check_bucketed(batch, policy)


@pytest.mark.parametrize("kwargs", [
    {"max_batch_tokens": 1000},  # not a multiple of the large step
    {"max_batch_tokens": 0},
    {"max_batch_seqs": 0},
    {"max_batch_seqs": 1024},  # more than the largest bucket holds
])
def test_config_rejects_limits_off_the_bucket_grid(kwargs):
    with pytest.raises(ValueError):
        BatcherConfig(**kwargs)


def test_empty_sequence_is_rejected():
    with pytest.raises(ValueError):
        TokenBudgetBatcher().add([], 0)


def test_cost_is_linear_in_queued_sequences():
    # A re-scan of the queue per add or per batch would take minutes here; linear work, a second.
    batcher = TokenBudgetBatcher(BatcherConfig(max_batch_tokens=16384, max_batch_seqs=3))
    sequence = [1] * 3
    start = time.perf_counter()
    for tag in range(60_000):
        batcher.add(sequence, tag)
    count = 0
    while (batch := batcher.next_batch(flush=True)) is not None:
        count += batch.num_seqs
    assert count == 60_000
    assert time.perf_counter() - start < 10
