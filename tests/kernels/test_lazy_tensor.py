"""LazyTensor and the pinned slots behind it, with a stand-in for CUDA events: result() returns a
copy the caller owns, read() hands over the buffer itself once, and a reused slot never loses the
rows of a handle that was not read yet."""
from __future__ import annotations

import pytest
import torch

from embedpipe.kernels.cuda.runner import PinnedSlots
from embedpipe.kernels.lazy_tensor import LazyTensor

NUM_SLOTS = 4  # as a CUDA runner of 3 batches in flight keeps


class DoneEvent:
    """An event whose work has always completed (the host-side bookkeeping is what is tested)."""

    def __init__(self):
        self.synchronized = 0

    def record(self, stream=None):
        pass

    def query(self) -> bool:
        return True

    def synchronize(self):
        self.synchronized += 1


def test_result_is_a_copy_that_outlives_the_buffer():
    buffer = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    handle = LazyTensor(buffer, DoneEvent())
    rows = handle.result()
    buffer.fill_(-1)  # a later batch reuses the pinned buffer
    assert rows.tolist() == torch.arange(12, dtype=torch.float32).reshape(3, 4).tolist()
    assert handle.result() is rows


def test_read_hands_over_the_buffer_itself_once_and_waits_for_the_device_first():
    buffer = torch.ones(2, 4)
    event = DoneEvent()
    handle = LazyTensor(buffer, event)
    seen = handle.read(lambda rows: (rows.data_ptr(), rows.sum().item()))
    assert seen == (buffer.data_ptr(), 8.0) and event.synchronized == 1
    with pytest.raises(RuntimeError, match="read"):
        handle.result()
    with pytest.raises(RuntimeError, match="read"):
        handle.read(lambda rows: None)
    handle.release()  # nothing left to copy: no error


def test_a_completed_cpu_handle_reads_and_returns_its_tensor():
    out = torch.full((2, 3), 5.0)
    handle = LazyTensor(out)
    assert handle.done() and handle.read(lambda rows: rows is out) and handle.result() is out


def test_a_reused_slot_copies_the_unread_rows_out_first():
    slots = PinnedSlots(torch.float32, (4,), num_slots=NUM_SLOTS, make_event=DoneEvent, pin=False)
    handles = []
    for batch in range(NUM_SLOTS + 1):  # the last take reuses the first slot
        slot, host = slots.take(2)
        host.fill_(batch)
        handle = LazyTensor(host, slots.events[slot])
        slots.readers[slot] = handle
        handles.append(handle)
    assert handles[0].result().tolist() == [[0.0] * 4] * 2  # copied out before batch 4 overwrote it
    assert handles[-1].read(lambda rows: rows.tolist()) == [[float(NUM_SLOTS)] * 4] * 2
