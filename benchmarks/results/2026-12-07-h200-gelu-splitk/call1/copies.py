"""Async copies between pinned host buffers and device memory, through the CUDA driver.

A batch-1 step's host part before its graph launches was ~10 us on an H100, 5.2 of them in torch's copy_ of the
pinned staging slot (dispatch, and the pinned allocator's event record; results/2026-12-06-h200-launch, call 8).
The runner guards its pinned slots with events of its own (runner.PinnedSlots), so it needs only the copy itself:
the driver's cuMemcpy*Async call, made through ctypes. Both tensors must be contiguous and of the same size in bytes;
the host one pinned (a pageable one would make the call synchronous).
"""
from __future__ import annotations

import ctypes
import functools

import torch


@functools.cache
def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    htod, dtoh = lib.cuMemcpyHtoDAsync_v2, lib.cuMemcpyDtoHAsync_v2
    htod.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    dtoh.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    htod.restype = dtoh.restype = ctypes.c_int
    return htod, dtoh


def to_device(dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """dst (device) <- src (pinned host), queued on stream."""
    _check_sizes(dst, src)
    _check(_driver()[0](dst.data_ptr(), src.data_ptr(), src.nbytes, stream.cuda_stream), "cuMemcpyHtoDAsync")


def to_host(dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """dst (pinned host) <- src (device), queued on stream."""
    _check_sizes(dst, src)
    _check(_driver()[1](dst.data_ptr(), src.data_ptr(), src.nbytes, stream.cuda_stream), "cuMemcpyDtoHAsync")


def _check(status: int, call: str) -> None:
    if status:
        raise RuntimeError(f"{call} failed with CUDA driver error {status}")


def _check_sizes(dst: torch.Tensor, src: torch.Tensor) -> None:
    if dst.nbytes != src.nbytes or not (dst.is_contiguous() and src.is_contiguous()):
        raise ValueError(f"a raw copy needs contiguous tensors of one size: {tuple(dst.shape)} <- {tuple(src.shape)}")
