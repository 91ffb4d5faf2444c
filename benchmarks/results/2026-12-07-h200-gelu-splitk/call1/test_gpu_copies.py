"""The runner's raw driver copies (kernels/cuda/copies.py) against torch's copy_: same bytes, in stream order.

Marked `gpu`: skipped without a CUDA device.
"""
import pytest
import torch

from embedpipe.kernels.cuda import copies

pytestmark = pytest.mark.gpu


def test_copies_move_the_same_bytes_as_torch_in_stream_order():
    stream = torch.cuda.current_stream()
    host = torch.arange(1000, dtype=torch.int32).pin_memory()
    device = torch.full((1000,), -1, dtype=torch.int32, device="cuda")
    copies.to_device(device, host, stream)
    doubled = device * 2  # queued after the copy on the same stream: it must see the copied values
    back = torch.empty((1000,), dtype=torch.int32).pin_memory()
    copies.to_host(back, doubled, stream)
    stream.synchronize()
    assert torch.equal(back, host * 2)


def test_copies_of_rows_take_the_slice_only():
    stream = torch.cuda.current_stream()
    out = torch.randn(8, 384, device="cuda")
    host = torch.zeros(8, 384).pin_memory()
    copies.to_host(host[:3], out[:3], stream)
    stream.synchronize()
    assert torch.equal(host[:3], out[:3].cpu()) and not host[3:].any()


def test_a_copy_of_mismatched_sizes_is_refused_before_it_is_queued():
    host = torch.zeros(10, dtype=torch.int32).pin_memory()
    device = torch.zeros(12, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="one size"):
        copies.to_device(device, host, torch.cuda.current_stream())
