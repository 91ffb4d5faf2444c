"""The device-free parts of the GPU engine: graph-cache policy, buckets, LazyTensor and slot guards."""
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.attention import AttentionSpec
from embedpipe.kernels.cuda.attention import TorchVarlenAttention
from embedpipe.kernels.cuda.runner import PinnedSlots
from embedpipe.kernels.graph_cache import Action, GraphCache, GraphConfig
from embedpipe.kernels.lazy_tensor import LazyTensor

NUM_SLOTS = 4  # as a CUDA runner of 3 batches in flight keeps


def _run(cache, key, log):
    return cache.run(key, lambda: log.append(("eager", key)) or "eager",
                     lambda: log.append(("capture", key)) or f"graph{key}",
                     lambda entry: log.append(("replay", entry)) or "replay")


def test_first_hit_eager_second_captures_then_replays():
    cache, log = GraphCache(), []
    results = [_run(cache, (1024, 16), log) for _ in range(4)]
    assert results == ["eager", "replay", "replay", "replay"]
    assert log == [("eager", (1024, 16)), ("capture", (1024, 16)), ("replay", "graph(1024, 16)"),
                   ("replay", "graph(1024, 16)"), ("replay", "graph(1024, 16)")]
    assert cache.counters.as_dict() == {"eager_runs": 1, "graph_captures": 1, "graph_replays": 3}


def test_keys_are_independent():
    cache = GraphCache()
    assert [cache.action(k) for k in [(64, 2), (128, 2), (64, 2), (64, 4), (128, 2)]] == [
        Action.EAGER, Action.EAGER, Action.CAPTURE, Action.EAGER, Action.CAPTURE]


def test_graph_limit_keeps_later_keys_eager():
    cache, log = GraphCache(GraphConfig(max_graphs=1)), []
    for key in [(64, 2), (64, 2), (128, 2), (128, 2), (128, 2)]:
        _run(cache, key, log)
    assert list(cache.entries) == [(64, 2)]
    assert cache.counters.as_dict() == {"eager_runs": 4, "graph_captures": 1, "graph_replays": 1}


def test_batches_past_the_largest_bucket_run_eagerly():
    cache = GraphCache(GraphConfig(max_graph_tokens=2048))
    assert [cache.action((4096, 8)) for _ in range(3)] == [Action.EAGER] * 3
    assert [cache.action((2048, 8)) for _ in range(2)] == [Action.EAGER, Action.CAPTURE]


def test_disabled_graphs_always_eager():
    cache = GraphCache(GraphConfig(enabled=False))
    assert {cache.action((64, 2)) for _ in range(5)} == {Action.EAGER}


def test_bucket_selection():
    policy = BucketPolicy()
    assert [policy.pad_tokens(n) for n in (1, 64, 65, 2048, 2049, 2304, 2305)] == [64, 64, 128, 2048, 2304, 2304, 2560]
    # real sequences plus the padding sequence
    assert [policy.pad_seqs(n) for n in (1, 3, 4, 1023, 1024)] == [2, 4, 8, 1024, 1025]
    batch = pack([[5] * 10, [6] * 70], policy)
    assert batch.key == (128, 4)
    assert batch.cu_seqlens.tolist() == [0, 10, 80, 128, 128]  # slot 2 owns the 48 padding tokens


def test_varlen_graph_key_bounds_the_longest_sequence_by_a_power_of_two():
    """max_q sizes the kernel's grid and is baked into a graph, so it is part of the key."""
    attention, policy = TorchVarlenAttention(AttentionSpec(16, 8, 64, causal=True), max_seqlen=1024), BucketPolicy()
    key = lambda lengths: attention.graph_key(pack([[1] * n for n in lengths], policy))
    assert key([100] * 40) == (4096, 64, 128)  # not the 4,096 tokens of the batch
    assert key([60, 20]) == (128, 4, 128)  # at least the kernel's 128-row block
    assert key([129] + [100] * 39) == (4096, 64, 256)
    assert key([1000, 24]) == (1024, 4, 1024)  # at most the model's positions
    assert key([600]) == (640, 2, 640)  # at most the batch's tokens
    # the padding sequence counts: 2,049 tokens pad to 2,304, a 255-token padding sequence
    assert key([120] * 17 + [9]) == (2304, 32, 256)
    for lengths in ([100] * 40, [129] + [100] * 39, [1000, 24], [600], [120] * 17 + [9]):
        batch = pack([[1] * n for n in lengths], policy)
        spans = (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).max()
        assert spans <= attention.graph_key(batch)[2]
    assert key([100] * 40) != key([200] * 20)  # same (tokens, sequences) bucket, another graph


@pytest.mark.parametrize("lengths", [[7], [60, 20], [100] * 40, [120] * 17 + [9], [1] * 70, [3, 500, 2]])
def test_a_packed_batch_knows_its_key_arrays_and_longest_sequence(lengths):
    """pack hands its arrays and the longest sequence (the padding sequence's too) to the batch; a batch made from
    the tensors alone computes the same (in Python for a few sequences, numpy for many)."""
    import numpy as np
    from embedpipe.kernels.batch import Batch, longest_sequence

    for policy in (BucketPolicy(), None):
        packed = pack([list(range(1, n + 1)) for n in lengths], policy)
        bare = Batch(packed.input_ids.clone(), packed.cu_seqlens.clone(), packed.num_seqs, packed.num_tokens)
        cu = packed.cu_seqlens.numpy()
        want = int(np.diff(cu).max())
        assert packed.longest == bare.longest == longest_sequence(cu) == want
        assert packed.key == bare.key == (packed.input_ids.shape[0], packed.cu_seqlens.shape[0] - 1)
        for got, tensor in zip(packed.arrays, (packed.input_ids, packed.cu_seqlens)):
            assert np.shares_memory(got, tensor.numpy()) and got.tolist() == tensor.tolist()
        assert [a.tolist() for a in bare.arrays] == [a.tolist() for a in packed.arrays]


def test_slot_views_are_made_once_and_dropped_when_the_buffer_grows():
    slots = PinnedSlots(torch.int32, num_slots=1, make_event=FakeEvent, pin=False)
    slot, host = slots.take(8)
    assert slots.take(8)[1] is host and slots.view(slot, 2, 5) is slots.view(slot, 2, 5)
    array = slots.array(slot, 8)
    array[:] = range(8)  # the buffer's memory
    assert host.tolist() == list(range(8)) and slots.view(slot, 2, 5).tolist() == [2, 3, 4]
    _, grown = slots.take(100)  # a new buffer: no view of the old one is handed out
    assert grown.shape == (100,) and slots.take(8)[1].data_ptr() == grown.data_ptr()


class FakeEvent:
    """Stands in for torch.cuda.Event: completes when the test says so."""

    def __init__(self):
        self.recorded, self.complete, self.waits = 0, True, 0

    def record(self):
        self.recorded += 1
        self.complete = False

    def query(self):
        return self.complete

    def synchronize(self):
        self.waits += 1
        self.complete = True


def test_lazy_tensor_waits_on_its_event_and_owns_its_result():
    host, event = torch.arange(6.0).view(2, 3), FakeEvent()
    event.record()
    lazy = LazyTensor(host, event)
    assert not lazy.done()
    result = lazy.result()
    assert event.waits == 1 and lazy.done()
    host.zero_()  # the pinned buffer is reused by a later batch
    assert result.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert lazy.result() is result and event.waits == 1


def test_cpu_lazy_tensor_is_complete_at_once():
    lazy = LazyTensor(torch.ones(2))
    assert lazy.done() and lazy.result().tolist() == [1.0, 1.0]


def test_slot_reuse_resolves_the_previous_reader_before_overwriting():
    slots = PinnedSlots(torch.float32, (2,), num_slots=NUM_SLOTS, make_event=FakeEvent, pin=False)
    handles = []
    for i in range(NUM_SLOTS + 2):
        slot, host = slots.take(1)
        host.fill_(float(i))  # the device copy of batch i
        slots.events[slot].record()
        handles.append(LazyTensor(host, slots.events[slot]))
        slots.readers[slot] = handles[-1]
    # batches 0 and 1 were resolved when their slots were taken again, before the overwrite
    assert [h.result().tolist() for h in handles] == [[[float(i)] * 2] for i in range(NUM_SLOTS + 2)]
    assert slots.events[0].waits >= 1


def test_slots_grow_and_keep_their_rows():
    slots = PinnedSlots(torch.int32, num_slots=NUM_SLOTS, make_event=FakeEvent, pin=False)
    _, small = slots.take(4)
    assert small.shape == (4,)
    for _ in range(NUM_SLOTS - 1):
        slots.take(1)
    _, large = slots.take(100)
    assert large.shape == (100,)


@pytest.mark.parametrize("bad", [dict(max_graphs=-1), dict(max_graph_tokens=0)])
def test_graph_config_validation(bad):
    with pytest.raises(ValueError):
        GraphConfig(**bad)
