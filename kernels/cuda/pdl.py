"""Programmatic dependent launch (PDL) for the Triton kernels of a forward pass (CUDA, Hopper on).

At a batch of one each of a layer's kernels costs ~2-6 us of device time whatever its work (BERT-base 1 x 128 tokens,
H200, 2026-12-04: 114 kernels, 0.39 ms): the launch, the programs' start and the first loads from HBM take more time
than the arithmetic. A kernel launched with PDL (`launch_pdl`, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
kept as a programmatic edge when captured in a CUDA graph) may start as soon as every program of the kernel before it
has called gdc_launch_dependents: its programs become resident while that kernel still runs, a matmul asks L2 for its
weights then (prefetch_l2: they do not depend on the kernel before), and each program waits at gdc_wait until the
kernel before has finished and its writes are visible.

The rule each kernel here keeps (`wait`): it calls gdc_wait before its first load of an activation and before any
store, then releases the kernel after it. So a kernel never reads what the one before has not written yet, never
overwrites what that one still reads (the caching allocator reuses freed memory in stream order), and by induction the
same holds for every kernel further back. Kernels of other libraries (cuBLAS) launch without the attribute and wait
for everything before them, as before.
"""
from __future__ import annotations

import functools
from types import MappingProxyType

import torch
import triton
import triton.language as tl

OFF = MappingProxyType({"PDL": False})
ON = MappingProxyType({"PDL": True, "launch_pdl": True})

# The most tokens a batch may hold for its kernels to launch with PDL. Measured on an H100 (results/2026-12-06-h200-pdl,
# 3 rounds, fresh processes alternated), call 1: at 1 x 16 and 1 x 128 tokens BERT-base 0.411 -> 0.367 and 0.448 ->
# 0.398 ms, MiniLM-L6 0.189 -> 0.163 at 128, Qwen3-0.6B 1.122 -> 1.088 and 1.233 -> 1.244; at 64 x 512 every model a
# little slower (MiniLM-L6 2.68 -> 2.79 ms a batch, Qwen3-0.6B 63.8 -> 64.4); call 2, this gate: BERT-base 1 x 128
# 0.492 -> 0.408, 64 x 512 unchanged. 256 is the split-K projections' bound (triton_split_k.TOKEN_RANGE); nothing
# between 128 and 32,768 tokens was measured.
MAX_TOKENS = 256


@functools.cache
def supported(device: torch.device) -> bool:
    """A GPU with PDL (compute capability 9.0 on) and a Triton that launches with it and has the gdc instructions."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        return "launch_pdl" in CUDAOptions.__dataclass_fields__ and hasattr(tl.extra.cuda, "gdc_wait")
    except (ImportError, AttributeError):
        return False


def options(tokens: torch.Tensor) -> MappingProxyType:
    """The launch keywords of a kernel that takes the PDL constexpr; `tokens`: a tensor of the batch's (a row a token,
    on the kernel's device): with PDL on a GPU that supports it, for batches of up to MAX_TOKENS."""
    return ON if tokens.shape[0] <= MAX_TOKENS and supported(tokens.device) else OFF


@triton.jit
def wait(PDL: tl.constexpr):
    """Waits until the kernel before has finished and its writes are visible, then lets the kernel after start.
    Call it before the first load of an activation and before any store. No-op where options() turned PDL off (the
    CPU: Triton's interpreter has no gdc instructions)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def prefetch_l2(ptrs):
    """Asks L2 for the 128-byte lines holding ptrs (any shape of pointers, each inside its tensor: the callers clamp
    them). A hint: nothing is loaded to registers."""
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def prefetch_weight_tile(W, stride_w, row_begin, row_end, col_begin, col_end, ROWS: tl.constexpr,
                         LINES: tl.constexpr):
    """Asks L2 for W[row_begin : row_begin + ROWS, col_begin : col_end] of a half-precision weight (64 units a
    128-byte line; LINES >= the lines of the column range), rows clamped below row_end, columns below col_end."""
    rows = tl.minimum(row_begin + tl.arange(0, ROWS), row_end - 1).to(tl.int64)
    cols = tl.minimum(col_begin + tl.arange(0, LINES) * 64, col_end - 1)
    prefetch_l2(W + rows[:, None] * stride_w + cols[None, :])


def prefetch_lines(num_cols: int, launch: MappingProxyType) -> int:
    """LINES for prefetch_weight_tile over num_cols half-precision columns: a power of two (a Triton shape); 1 for a
    launch without PDL, which prefetches nothing (one compiled variant whatever the width)."""
    return triton.next_power_of_2(max(1, triton.cdiv(num_cols, 64))) if launch["PDL"] else 1
