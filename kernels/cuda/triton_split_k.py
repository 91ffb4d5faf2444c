"""A projection's matmul split along K into float32 partial sums, for the add-and-norm kernel after it to add up (CUDA,
Triton).

BERT's attention-output and FFN-output projections feed LayerNorm(x + residual), Qwen3's o_proj and down_proj feed
RMSNorm(x + residual) (kernels/cuda/triton_ops.py). At a batch of one these are small matmuls ([128, 3,072] x [3,072,
768] for BERT-base's FFN output) whose output tiles leave most SMs idle: cuBLAS splits some of them along K and adds
the pieces in a reduce kernel of its own (2.4 us of each BERT-base layer's ~30 at 1 x 128 tokens, H200, 2026-12-04),
others it does not split. Here such a projection is split so that its programs fill the SMs (where that measured
faster: TOKEN_RANGE), the pieces are the planes of a float32 [splits, T, N] tensor, and the norm kernel that
follows sums them in a fixed order as it loads each row, then adds the bias and rounds to the activation dtype where
the matmul would have: one kernel less per projection, and the same arithmetic as cuBLAS's output (float32 sums,
bias, one rounding) up to the order of the sums.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from embedpipe.kernels.cuda import pdl
from embedpipe.kernels.cuda.triton_linear import sm_count, tma_operands_fit


@dataclass(frozen=True)
class SplitConfig:
    block_m: int
    block_n: int
    block_k: int
    splits: int  # K ranges, one plane of partial sums each
    num_warps: int = 4
    # Pipelines 4 stages deep (3 before). Alone (split_k_bench.py --launch, H100, 128 tokens, call 17): Qwen3-0.6B's
    # down 7.01 -> 6.66 us, BERT-base's FFN output 6.99 -> 6.69 (call 12: 7.02 -> 6.63, 7.25 -> 6.98); the engine (3
    # rounds of fresh processes alternated, two runs on one H100: results/2026-12-07-h200-gelu-splitk, calls 12 and 16),
    # graph replayed at 1 x 128: Qwen3-0.6B 0.937 -> 0.918 and 0.933 -> 0.922 ms, BERT-base 0.319 -> 0.313 and 0.317 ->
    # 0.311; steps 1.012 -> 0.959 and 0.357 -> 0.347 (call 16); MiniLM-L6 1 x 128 0.108 either way, 1 x 16 0.096 ->
    # 0.097. 5 stages (call 17): Qwen3-0.6B 1 x 16 0.846 -> 0.826, 1 x 128 and BERT-base no better; 6 do not fit 128-row
    # tiles' shared memory. So 64-row tiles take 5 (_tiled_split): Qwen3-0.6B 1 x 16 replayed 0.849 -> 0.829, 1 x 128
    # 0.921 -> 0.922, BERT-base and MiniLM-L6 unchanged (0.277 / 0.314, 0.097 / 0.109; 2026-12-07, call 19).
    num_stages: int = 4


MAX_SPLITS = 8

# The token counts (least, most) at which TritonOps runs its add-and-norm projections through this kernel instead of
# cuBLAS, None: never. On an H100 (engine, 3 rounds of fresh processes): without PDL it won for BERT-base and
# MiniLM-L6 (1 x 128: 0.450 -> 0.436 ms, 0.181 -> 0.172) and lost for Qwen3-0.6B's 1,024-output projections (1.232 ->
# 1.245; results/2026-12-06-h200-batch1-fusion); launched with PDL, its weight tiles asked of L2 while the kernel
# before runs, it wins for Qwen3 too (the graph replayed: 1 x 16 0.984 -> 0.867 ms, 1 x 128 1.156 -> 1.124;
# results/2026-12-06-h200-qwen-chain, call 2). The kernel alone lost to cuBLAS + norm above 256 tokens (BERT-base o:
# 8.9 against 7.3 us at 512).
TOKEN_RANGE: tuple[int, int] | None = (1, 256)


def split_config(num_tokens: int, n: int, k: int, num_sms: int) -> SplitConfig:
    """Tiles of 64 x 32 outputs over BLOCK_K = 128 where K is a multiple of 128 and they still split K at least two
    ways, else 64 x 64 over BLOCK_K = 64 (_tiled_split). At 65-128 tokens, tiles of 128 rows instead where their split
    makes up the halved tile count (at least as many programs): each weight tile is then read by one program, not two,
    and each program's K loop is shorter. Only where the 64-row tiles split: on a GPU of fewer SMs, where they would
    not, nothing measured the 128-row ones.

    64 x 32 x 128 against 64 x 64 x 64, engine at 1 x 128 tokens (H100, 3 rounds of fresh processes, graph replayed):
    BERT-base 0.329 -> 0.327 ms, Qwen3-0.6B 1.108 -> 1.090 (results/2026-12-07-h200-gelu-splitk, call 2); alone,
    BERT-base's o 6.24 -> 5.80 us at 128 tokens, 5.37 -> 5.38 at 64 (results/2026-12-06-h200-batch1-fusion, call 2).
    Where the narrower tiles fill the SMs without a split (BERT-base's FFN output at 256 tokens) nothing measured
    them, so those keep the 64 x 64 x 64 split. 128-row tiles at 1 x 128, replayed (one H100, call 4): Qwen3-0.6B
    1.093 -> 1.001 ms (o and down: 32 tiles split 4 ways against 64 split 2); BERT-base 0.323 -> 0.322 with them
    in every projection; MiniLM-L6 0.108 -> 0.110, its FFN output's 12 tiles split only 6 ways (72 programs against
    96), which this rule leaves on 64 rows, as BERT-base's attention output (72 against 96)."""
    if k % 128 == 0:
        wide = _tiled_split(num_tokens, n, k, num_sms, 64, 32, 128)
        if wide.splits >= 2:
            if 64 < num_tokens <= 128:
                tall = _tiled_split(num_tokens, n, k, num_sms, 128, 32, 128)
                if _programs(tall, num_tokens, n) >= _programs(wide, num_tokens, n):
                    return tall
            return wide
    return _tiled_split(num_tokens, n, k, num_sms, 64, 64, 64)


def _programs(config: SplitConfig, num_tokens: int, n: int) -> int:
    """The kernel's grid size for a config: output tiles times K ranges."""
    return _tiles(num_tokens, n, config.block_m, config.block_n) * config.splits


def _tiles(num_tokens: int, n: int, block_m: int, block_n: int) -> int:
    """Output tiles of BLOCK_M x BLOCK_N over [num_tokens, n] (the last row and column tiles may be partial)."""
    return triton.cdiv(num_tokens, block_m) * triton.cdiv(n, block_n)


def _tiled_split(num_tokens: int, n: int, k: int, num_sms: int, block_m: int, block_n: int, block_k: int
                 ) -> SplitConfig:
    """As many K ranges (at least two BLOCK_K each, at most MAX_SPLITS) as keep the programs within one wave of the
    SMs; every range holds the same count of BLOCK_K steps but the last, which may hold fewer, none empty."""
    tiles = _tiles(num_tokens, n, block_m, block_n)
    k_blocks = triton.cdiv(k, block_k)
    splits = max(1, min(MAX_SPLITS, num_sms // tiles, k_blocks // 2))
    per_split = triton.cdiv(k_blocks, splits)
    return SplitConfig(block_m, block_n, block_k, triton.cdiv(k_blocks, per_split),
                       num_stages=5 if block_m == 64 else 4)  # SplitConfig.num_stages says why


@triton.jit
def _partials_kernel(x_desc, w_desc, W, stride_w, P, M, N, K, k_per_split, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PDL: tl.constexpr, LINES: tl.constexpr):
    """P[split] [M, N] float32 = X[:, range] @ W[:, range].T over the split's K range [split * k_per_split,
    + k_per_split) (k_per_split a multiple of BLOCK_K). Program (tile, split); tiles row-major; X and W tiles moved by
    TMA descriptors (x [BLOCK_M, BLOCK_K], W [BLOCK_N, BLOCK_K]; past the ends they load as zeros). PDL: the
    program's weight tile (W's rows, stride_w apart: LINES 128-byte lines a row) asked of L2 while the kernel before
    runs (pdl.py)."""
    tile, split = tl.program_id(0), tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    off_m, off_n = (tile // tiles_n) * BLOCK_M, (tile % tiles_n) * BLOCK_N
    k_begin = split * k_per_split
    if PDL:
        pdl.prefetch_weight_tile(W, stride_w, off_n, N, k_begin, tl.minimum(k_begin + k_per_split, K), BLOCK_N, LINES)
    pdl.wait(PDL)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(k_begin, tl.minimum(k_begin + k_per_split, K), BLOCK_K):
        acc = tl.dot(x_desc.load([off_m, k]), w_desc.load([off_n, k]).T, acc)
    rows, cols = off_m + tl.arange(0, BLOCK_M), off_n + tl.arange(0, BLOCK_N)
    plane = P + split.to(tl.int64) * M * N
    tl.store(plane + rows[:, None] * N + cols[None, :], acc, mask=(rows < M)[:, None] & (cols < N)[None, :])


def fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the kernel can run x [T, K] @ weight [N, K].T: operands its TMA descriptors take
    (triton_linear.tma_operands_fit), at least one token, K a multiple of BLOCK_K."""
    return tma_operands_fit(x, weight) and x.shape[0] > 0 and x.shape[1] % 64 == 0


def takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether TritonOps runs a projection's matmul here: it fits, with a token count in TOKEN_RANGE."""
    return TOKEN_RANGE is not None and TOKEN_RANGE[0] <= x.shape[0] <= TOKEN_RANGE[1] and fits(x, weight)


def partials(x: torch.Tensor, weight: torch.Tensor, config: SplitConfig | None = None) -> torch.Tensor:
    """x [T, K], weight [N, K] -> float32 [splits, T, N] whose sum over the first dim is x @ weight.T."""
    (m, k), n = x.shape, weight.shape[0]
    config = config or split_config(m, n, k, sm_count(x.device))
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    if k % bk or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"split-K partials need K ({k}) a multiple of {bk} and rows contiguous")
    k_per_split = triton.cdiv(triton.cdiv(k, bk), config.splits) * bk
    splits = triton.cdiv(k, k_per_split)  # none empty
    out = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
    grid = (_tiles(m, n, bm, bn), splits)
    launch = pdl.options(x)
    _partials_kernel[grid](TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(weight, [bn, bk]),
                           weight, weight.stride(0), out, m, n, k, k_per_split, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                           LINES=pdl.prefetch_lines(k_per_split, launch), num_warps=config.num_warps,
                           num_stages=config.num_stages, **launch)
    return out
