"""InFlight, the one driver of Engine.step: rows consumed in launch order, never more than max_in_flight
batches launched and unread, a failed launch keeps the rows before it, out-of-memory batches as halves."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.pipeline.batching.in_flight import InFlight
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from support.corpus import variant_texts
from support.engines import OutOfMemoryAbove
from support.numerics import cosine


@pytest.fixture(scope="module")
def engine(tiny_model):
    return Engine(EngineConfig(model=str(tiny_model), device="cpu"))


@pytest.fixture(scope="module")
def batches(engine):
    """Ten batches of 4 texts each, tagged with the texts' positions 0..39."""
    sequences = make_tokenizer(engine).encode(variant_texts(40))[0]
    return [pack(sequences[i:i + 4], BucketPolicy(), tags=list(range(i, i + 4))) for i in range(0, 40, 4)]


class CountingEngine:
    """The real engine; records, at each launch, how many launched batches were not read yet."""

    def __init__(self, engine: Engine, fail_at: int | None = None):
        self.engine, self.fail_at = engine, fail_at
        self.unread, self.unread_at_launch = 0, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, batch):
        if len(self.unread_at_launch) == self.fail_at:
            raise RuntimeError("injected launch failure")
        self.unread_at_launch.append(self.unread)
        self.unread += 1
        return CountedHandle(self, self.engine.step(batch))


class CountedHandle:
    def __init__(self, owner: CountingEngine, handle):
        self.owner, self.handle = owner, handle

    def done(self):
        return True

    def read(self, consume):
        self.owner.unread -= 1
        return self.handle.read(consume)


def collect(consumed: dict):
    def consume(batch, rows):
        for tag, row in zip(batch.tags, rows.numpy()):
            consumed[tag] = row.copy()  # the rows are the engine's buffer: copied
    return consume


@pytest.mark.parametrize("max_in_flight", [1, 2, 3])
def test_rows_come_back_in_launch_order_with_at_most_max_in_flight_unread(engine, batches, max_in_flight):
    counting = CountingEngine(engine)
    in_flight = InFlight(counting, BucketPolicy(), max_in_flight=max_in_flight)
    consumed: dict[int, np.ndarray] = {}
    for batch in batches:
        in_flight.submit(batch, collect(consumed))
        assert len(in_flight) == min(max_in_flight - 1, len(counting.unread_at_launch))
    in_flight.drain()
    assert list(consumed) == list(range(40)) and len(in_flight) == 0  # dicts keep insertion order
    assert max(counting.unread_at_launch) == max_in_flight - 1
    for batch in batches:
        np.testing.assert_array_equal(np.stack([consumed[t] for t in batch.tags]), engine.step(batch).result().numpy())


def test_the_default_is_the_engines_max_in_flight_and_more_is_refused(engine):
    assert InFlight(engine, BucketPolicy()).max_in_flight == engine.max_in_flight == EngineConfig().max_in_flight
    with pytest.raises(ValueError, match="between 1 and the engine's 3"):
        InFlight(engine, BucketPolicy(), max_in_flight=4)
    with pytest.raises(ValueError, match="between 1"):
        InFlight(engine, BucketPolicy(), max_in_flight=0)


def test_a_failed_launch_reads_the_batches_before_it_then_raises(engine, batches):
    in_flight = InFlight(CountingEngine(engine, fail_at=5), BucketPolicy(), max_in_flight=3)
    consumed: dict[int, np.ndarray] = {}
    with pytest.raises(RuntimeError, match="injected launch failure"):
        for batch in batches:
            in_flight.submit(batch, collect(consumed))
    assert list(consumed) == list(range(20)) and len(in_flight) == 0  # the five launched batches, all read


@pytest.mark.parametrize("at", ["step", "result"])
def test_a_batch_out_of_memory_is_consumed_as_its_halves_in_order(engine, batches, at):
    whole = pack([s for b in batches for s in _sequences(b)], BucketPolicy(), tags=list(range(40)))
    in_flight = InFlight(OutOfMemoryAbove(engine, max_tokens=128, at=at), BucketPolicy(), max_in_flight=2)
    consumed: dict[int, np.ndarray] = {}
    in_flight.submit(whole, collect(consumed))
    in_flight.drain()
    assert in_flight.num_splits >= 1 and list(consumed) == list(range(40))
    expected = engine.step(whole).result()
    assert cosine(torch.from_numpy(np.stack(list(consumed.values()))), expected).min() >= 0.99999


def _sequences(batch) -> list[list[int]]:
    cu, ids = batch.cu_seqlens.tolist(), batch.input_ids.tolist()
    return [ids[cu[i]:cu[i + 1]] for i in range(batch.num_seqs)]
