"""A Triton GEMM for few rows, measured against cuBLAS by batch1_profile.py: out [M, N] = x [M, K] @ weight [N, K]^T
(+ bias), M <= 128. Not in the engine: on the H200 (2026-12-01, in CUDA graphs) it was slower than cuBLAS at
M = 128 and at most ~19% faster at M = 64 (the down projection, K = 3072, split-K), less than the second kernel
its split-K needs would leave in a model.

Each program makes a [BLOCK_M, BLOCK_N] tile from a 1 / split_k slice of K. With split_k > 1 the slices'
float32 partials land in a workspace [split_k, M, N] and a second kernel sums them in a fixed order
(deterministic: no atomics) and adds the bias.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class SkinnyConfig:
    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def fits(self, k: int) -> bool:
        return k % (self.block_k * self.split_k) == 0


@triton.jit
def _skinny_gemm_kernel(X, W, B, Out, M, N, K, stride_x, stride_w, k_per_split,
                        HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n, pid_m, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    k_start = split * k_per_split
    x_ptrs = X + rm[:, None] * stride_x + (k_start + rk)[None, :]
    w_ptrs = W + rn[:, None] * stride_w + (k_start + rk)[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for _ in range(0, k_per_split, BLOCK_K):
        x = tl.load(x_ptrs, mask=rm[:, None] < M, other=0.0)
        w = tl.load(w_ptrs, mask=rn[:, None] < N, other=0.0)
        acc += tl.dot(x, tl.trans(w))
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if PARTIAL:  # float32 partial sums of this K slice: [split, M, N]
        tl.store(Out + split * M * N + rm[:, None] * N + rn[None, :], acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(B + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(Out + rm[:, None] * N + rn[None, :], acc.to(Out.dtype.element_ty), mask=mask)


@triton.jit
def _sum_partials_kernel(P, B, Out, MN, N, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.load(P + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLIT):  # in order: the same sum whatever the launch order
        acc += tl.load(P + s * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(B + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + offs, acc.to(Out.dtype.element_ty), mask=mask)


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  config: SkinnyConfig) -> torch.Tensor:
    """x [M, K] (rows contiguous), weight [N, K] -> [M, N] in x's dtype."""
    m, k = x.shape
    n = weight.shape[0]
    if not config.fits(k):
        raise ValueError(f"K {k} is not a multiple of block_k {config.block_k} x split_k {config.split_k}")
    block_m = max(16, min(128, triton.next_power_of_2(m)))
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, config.block_n), triton.cdiv(m, block_m), config.split_k)
    partial = config.split_k > 1
    target = torch.empty((config.split_k, m, n), dtype=torch.float32, device=x.device) if partial else out
    b = bias if bias is not None else weight
    _skinny_gemm_kernel[grid](x, weight, b, target, m, n, k, x.stride(0), weight.stride(0), k // config.split_k,
                              HAS_BIAS=bias is not None, PARTIAL=partial, BLOCK_M=block_m, BLOCK_N=config.block_n,
                              BLOCK_K=config.block_k, num_warps=config.num_warps, num_stages=config.num_stages)
    if partial:
        block = 1024
        _sum_partials_kernel[(triton.cdiv(m * n, block),)](target, b, out, m * n, n, SPLIT=config.split_k,
                                                           HAS_BIAS=bias is not None, BLOCK=block)
    return out
