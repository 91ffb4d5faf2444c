"""Ragged attention as one Triton kernel: a block is BLOCK_M query rows of one head of one sequence.

PyTorch's flash varlen kernel took 6.5 us a layer for one 128-token BERT-base query and 10.8 us on Qwen3-0.6B
(benchmarks/results/2026-12-01-h200-batch1-online); this kernel 3.4-5.0 us, and it was faster at every batch
measured up to 64 x 512 (benchmarks/attention_configs.py). Online softmax in float32 (exp2), the probabilities
rounded to the input dtype before the P @ V product, as the flash kernels do; the key blocks every row of a
query block sees run without masks, the rest with them.

The grid is fixed by the graph key: (query blocks of the longest sequence's bucket, sequence slots,
heads). A block past its sequence's end returns at once, so one captured grid serves every layout of
its key, empty padding slots included.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from embedpipe.kernels.attention import QKNormRope
from embedpipe.kernels.cuda import pdl
from embedpipe.kernels.cuda.triton_ops import rms_norm_rope

LOG2_E = 1.4426950408889634


@triton.jit
def _load(ptrs, mask, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(ptrs, mask=mask, other=0.0)
    return tl.load(ptrs)


@triton.jit
def _rotated_halves(X, stride_x, positions, ok, W, Cos, Sin, stride_cos, eps,
                    HALF: tl.constexpr, AXIS: tl.constexpr, MASKED: tl.constexpr):
    """Head vectors of one head (X: its first dimension in row 0) at `positions` of the sequence, normed and rotated
    (triton_ops.rms_norm_rope) as they load: AXIS 1 -> halves [len(positions), HALF] (queries), AXIS 0 ->
    [HALF, len(positions)] (keys, transposed). A row's position in its sequence indexes the RoPE tables."""
    dims = tl.arange(0, HALF)
    if AXIS == 1:
        rows, dims, mask = positions[:, None], dims[None, :], ok[:, None]
    else:
        rows, dims, mask = positions[None, :], dims[:, None], ok[None, :]
    dtype = X.dtype.element_ty
    x1 = _load(X + rows * stride_x + dims, mask, MASKED).to(tl.float32)
    x2 = _load(X + rows * stride_x + HALF + dims, mask, MASKED).to(tl.float32)
    c = _load(Cos + rows * stride_cos + dims, mask, MASKED).to(dtype).to(tl.float32)
    s = _load(Sin + rows * stride_cos + dims, mask, MASKED).to(dtype).to(tl.float32)
    w1, w2 = tl.load(W + dims).to(tl.float32), tl.load(W + HALF + dims).to(tl.float32)
    return rms_norm_rope(x1, x2, w1, w2, c, s, eps, dtype, AXIS, HALF)


@triton.jit
def _attend(q, q2, K, V, kv_head, stride_kt, stride_kh, stride_vt, stride_vh, rows, dims, best, total, acc,
            keys_begin, keys_end, scale_log2, KW, Cos, Sin, stride_cos, eps, MASKED: tl.constexpr,
            CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, NORM_ROPE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Online softmax over keys [keys_begin, keys_end) in blocks of BLOCK_N; MASKED: the last block may pass the
    sequence's end and (CAUSAL) some keys follow some rows. NORM_ROPE: q and q2 are the query halves, and each key
    block is normed and rotated as it loads (_rotated_halves). Returns the updated (best, total, acc)."""
    for key_start in range(keys_begin, keys_end, BLOCK_N):
        cols = key_start + tl.arange(0, BLOCK_N)  # [BLOCK_N] key positions
        col_ok = cols < keys_end
        if NORM_ROPE:
            k1, k2 = _rotated_halves(K + kv_head * stride_kh, stride_kt, cols, col_ok, KW, Cos, Sin, stride_cos, eps,
                                     HEAD_DIM // 2, 0, MASKED)  # [HEAD_DIM / 2, BLOCK_N] each
            scores = tl.dot(q2, k2, tl.dot(q, k1)) * scale_log2  # [BLOCK_M, BLOCK_N]
        else:
            k = _load(K + cols[None, :] * stride_kt + kv_head * stride_kh + dims[:, None], col_ok[None, :],
                      MASKED)  # [HEAD_DIM, BLOCK_N]
            scores = tl.dot(q, k) * scale_log2  # [BLOCK_M, BLOCK_N]
        v = _load(V + cols[:, None] * stride_vt + kv_head * stride_vh + dims[None, :], col_ok[:, None],
                  MASKED)  # [BLOCK_N, HEAD_DIM]
        if MASKED:
            visible = col_ok[None, :]
            if CAUSAL:
                visible = visible & (cols[None, :] <= rows[:, None])
            scores = tl.where(visible, scores, float("-inf"))
        new_best = tl.maximum(best, tl.max(scores, 1))
        rescale = tl.exp2(best - new_best)
        p = tl.exp2(scores - new_best[:, None])
        total = total * rescale + tl.sum(p, 1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v)
        best = new_best
    return best, total, acc


@triton.jit
def _varlen_attention_kernel(Q, K, V, Out, CuSeqlens, QW, KW, Cos, Sin, stride_qt, stride_qh, stride_kt, stride_kh,
                             stride_vt, stride_vh, stride_ot, stride_oh, stride_cos, eps, scale_log2,
                             GROUP: tl.constexpr, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NORM_ROPE: tl.constexpr,
                             PDL: tl.constexpr):
    pdl.wait(PDL)
    block, seq, head = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(CuSeqlens + seq)
    length = tl.load(CuSeqlens + seq + 1) - start
    first_row = block * BLOCK_M
    if first_row >= length:
        return
    # this sequence's rows, from pointers moved in int64 (a batch's T * H * D may pass 2^31)
    Q, K, V, Out = (Q + start.to(tl.int64) * stride_qt, K + start.to(tl.int64) * stride_kt,
                    V + start.to(tl.int64) * stride_vt, Out + start.to(tl.int64) * stride_ot)
    rows = first_row + tl.arange(0, BLOCK_M)  # [BLOCK_M] positions in the sequence
    dims = tl.arange(0, HEAD_DIM)
    kv_head = head // GROUP
    row_ok = rows < length
    if NORM_ROPE:  # the halves [BLOCK_M, HEAD_DIM / 2], normed and rotated
        q, q2 = _rotated_halves(Q + head * stride_qh, stride_qt, rows, row_ok, QW, Cos, Sin, stride_cos, eps,
                                HEAD_DIM // 2, 1, True)
    else:
        q = tl.load(Q + rows[:, None] * stride_qt + head * stride_qh + dims[None, :],
                    mask=row_ok[:, None], other=0.0)  # [BLOCK_M, HEAD_DIM]
        q2 = q
    best = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running row maximum (log2 units)
    total = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(score - best)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # first the keys every row of the block sees, in whole blocks of BLOCK_N, unmasked; then the rest, masked.
    # Causal rows see the keys up to themselves (so every row sees key 0: no row is all masked).
    if CAUSAL:
        unmasked_end = first_row // BLOCK_N * BLOCK_N
        keys_end = tl.minimum(length, first_row + BLOCK_M)
    else:
        unmasked_end = length // BLOCK_N * BLOCK_N
        keys_end = length
    best, total, acc = _attend(q, q2, K, V, kv_head, stride_kt, stride_kh, stride_vt, stride_vh, rows, dims,
                               best, total, acc, 0, unmasked_end, scale_log2, KW, Cos, Sin, stride_cos, eps,
                               False, CAUSAL, BLOCK_N, NORM_ROPE, HEAD_DIM)
    best, total, acc = _attend(q, q2, K, V, kv_head, stride_kt, stride_kh, stride_vt, stride_vh, rows, dims,
                               best, total, acc, unmasked_end, keys_end, scale_log2, KW, Cos, Sin, stride_cos, eps,
                               True, CAUSAL, BLOCK_N, NORM_ROPE, HEAD_DIM)
    out = acc / total[:, None]
    tl.store(Out + rows[:, None] * stride_ot + head * stride_oh + dims[None, :],
             out.to(Out.dtype.element_ty), mask=row_ok[:, None])


@dataclass(frozen=True)
class LaunchConfig:
    block_m: int  # query rows per block
    block_n: int  # keys per step of the online softmax
    num_warps: int
    num_stages: int


def launch_config(max_q: int, folded: bool = False) -> LaunchConfig:
    """Read off benchmarks/attention_configs.py on the H200 (2026-12-04; MiniLM, BERT-base and Qwen3-0.6B shapes,
    batches 1x16 to 64x512 and 1x4096): query blocks of 64 rows were fastest or within ~10% of it everywhere but a
    16-token query (max_q 64: blocks of 16, Qwen3 3.3 vs 4.0 us), and 3 stages from max_q 256 (Qwen3 1x4096
    192 vs 221 us) but not at 128 (5.0 vs 5.8 us). head_dim did not change the choice.

    folded (Qwen3's q/k norm and RoPE applied as q and k load), up to max_q 128: blocks of 16 rows, 8 warps and one
    stage, over key blocks of 64 (max_q 64) or 128. Alone (attention_configs.py --fold, H100): 3.9 against 6.9 us at
    1 x 16, 6.5 against 11.1 at 1 x 128 (16 x 64, 4 warps, 2 stages, the earlier choice); one stage was faster in
    every folded configuration timed (the key blocks go from registers into the norm, not through shared memory).
    In the engine (Qwen3-0.6B replayed, 3 rounds of fresh processes, H100): 1 x 16 0.878 -> 0.857 ms, 1 x 128
    0.996 -> 0.943 (results/2026-12-07-h200-gelu-splitk, calls 6-10)."""
    if folded and max_q <= 128:
        return LaunchConfig(16, 64 if max_q <= 64 else 128, 8, 1)
    if max_q <= 64:
        return LaunchConfig(16, 64, 4, 2)
    return LaunchConfig(64, 64, 4, 2 if max_q <= 128 else 3)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_q: int,
                     causal: bool, scale: float, config: LaunchConfig | None = None,
                     out: torch.Tensor | None = None, qk_norm_rope: QKNormRope | None = None) -> torch.Tensor:
    """q [T, H, D], k and v [T, Hkv, D] (H a multiple of Hkv, D a power of two), cu_seqlens [slots + 1] int32 on the
    device, max_q >= the longest sequence -> out [T, H, D] (a new tensor by default): each row attends to its own
    sequence's rows (causal: to those up to itself). Rows outside every sequence are left unwritten. config:
    launch_config's by default. qk_norm_rope: q and k are normed and rotated as the kernel loads them (each row at
    its place in its sequence), as ops.qk_norm_rope would have before; q and k are left as they are."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    num_heads, head_dim = q.shape[1:]
    config = config or launch_config(max_q, folded=qk_norm_rope is not None)
    out = torch.empty_like(q) if out is None else out
    grid = (triton.cdiv(max_q, config.block_m), cu_seqlens.shape[0] - 1, num_heads)
    rope = qk_norm_rope
    tables = (rope.q_weight, rope.k_weight, rope.cos, rope.sin, rope.cos.stride(0), rope.eps) if rope else (
        q, q, q, q, 0, 0.0)  # not read
    _varlen_attention_kernel[grid](
        q, k, v, out, cu_seqlens, *tables[:4], q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
        v.stride(1), out.stride(0), out.stride(1), *tables[4:], scale * LOG2_E, GROUP=num_heads // k.shape[1],
        CAUSAL=causal, HEAD_DIM=head_dim, BLOCK_M=config.block_m, BLOCK_N=config.block_n, NORM_ROPE=rope is not None,
        num_warps=config.num_warps, num_stages=config.num_stages, **pdl.options(q))
    return out


def supports(head_dim: int, num_heads: int, num_kv_heads: int) -> bool:
    """The shapes the kernel runs: a power-of-two head_dim from 16 to 128 (a 64 x 256 float32 accumulator would
    not fit its registers), whole groups of query heads."""
    return 16 <= head_dim <= 128 and head_dim == 1 << int(math.log2(head_dim)) and num_heads % num_kv_heads == 0
