"""The ops of kernels/ops.py as one Triton kernel each (CUDA). Arithmetic in float32, one rounding
to the activation dtype where the transformers reference rounds."""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from embedpipe.kernels.activations import ACTIVATIONS
from embedpipe.kernels.cuda import pdl, triton_linear, triton_split_k


@triton.jit
def _store_layer_norm(x, W, B, Out, cols, mask, N, eps):
    """One row: LayerNorm(x) (x float32 [BLOCK], zero past N) with weight and bias, stored to Out's row."""
    mean = tl.sum(x, axis=0) / N
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + cols, (centered * rstd * w + b).to(Out.dtype.element_ty), mask=mask)


@triton.jit
def _projection_row(X, Bias, row, stride_x, plane, cols, mask, dtype: tl.constexpr, SPLITS: tl.constexpr,
                    HAS_BIAS: tl.constexpr):
    """A row of a projection's output, float32 [BLOCK]: X's (SPLITS == 0: X is the output), or the sum of X's SPLITS
    float32 partial planes ([SPLITS, T, N], `plane` elements apart: triton_split_k), in order, plus the bias, rounded
    to dtype where the matmul rounds its output."""
    if SPLITS == 0:
        return tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    acc = tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
    for _ in tl.static_range(1, SPLITS):
        X += plane  # pointer arithmetic: 64-bit
        acc += tl.load(X + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(Bias + cols, mask=mask, other=0.0).to(tl.float32)
    return acc.to(dtype).to(tl.float32)


@triton.jit
def _add_layer_norm_kernel(X, Bias, R, W, B, Out, stride_x, plane, stride_r, N, eps, SPLITS: tl.constexpr,
                           HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """One program per row: LayerNorm(x + residual), x a projection's output row (_projection_row)."""
    pdl.wait(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = _projection_row(X, Bias, row, stride_x, plane, cols, mask, Out.dtype.element_ty, SPLITS, HAS_BIAS)
    if HAS_RESIDUAL:
        x += tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        x = x.to(Out.dtype.element_ty).to(tl.float32)  # the reference adds in the activation dtype
    _store_layer_norm(x, W, B, Out + row * N, cols, mask, N, eps)


@triton.jit
def _embed_layer_norm_kernel(Ids, Pos, Types, Word, Position, TokenType, W, B, Out, N, eps,
                             HAS_TYPES: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """One program per token: three embedding rows gathered, added in the reference's order, LayerNorm."""
    pdl.wait(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    dtype = Out.dtype.element_ty
    word = tl.load(Word + tl.load(Ids + row).to(tl.int64) * N + cols, mask=mask, other=0.0).to(tl.float32)
    type_row = tl.load(Types + row).to(tl.int64) if HAS_TYPES else 0
    token_type = tl.load(TokenType + type_row * N + cols, mask=mask, other=0.0).to(tl.float32)
    position = tl.load(Position + tl.load(Pos + row).to(tl.int64) * N + cols, mask=mask, other=0.0).to(tl.float32)
    x = ((word + token_type).to(dtype).to(tl.float32) + position).to(dtype).to(tl.float32)
    _store_layer_norm(x, W, B, Out + row * N, cols, mask, N, eps)


@triton.jit
def _add_rms_norm_kernel(X, Bias, R, W, Out, Sum, stride_x, plane, stride_r, N, eps, SPLITS: tl.constexpr,
                         HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """One program per row: s = x + residual and RMSNorm(s), x a projection's output row (_projection_row)."""
    pdl.wait(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = _projection_row(X, Bias, row, stride_x, plane, cols, mask, Out.dtype.element_ty, SPLITS, HAS_BIAS)
    if HAS_RESIDUAL:
        x += tl.load(R + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
    s = x.to(Out.dtype.element_ty)
    tl.store(Sum + row * N + cols, s, mask=mask)
    s = s.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (s * rstd).to(Out.dtype.element_ty).to(tl.float32)
    tl.store(Out + row * N + cols, (normed * w).to(Out.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_rope(x1, x2, w1, w2, cos, sin, eps, dtype: tl.constexpr, AXIS: tl.constexpr, HALF: tl.constexpr):
    """Qwen3's per-head RMSNorm, then rotate-half RoPE, of head vectors held as their halves x1 = x[:HALF] and
    x2 = x[HALF:] (float32 tiles, the head dimension along AXIS); w1, w2: the norm weight's halves, cos, sin: each
    row's table halves rounded to dtype (as transformers casts them), float32, all broadcast to the tiles. Returns the
    rotated halves in dtype, rounded where transformers rounds (the normed vector, its product with the weight)."""
    rstd = 1.0 / tl.sqrt((tl.sum(x1 * x1, axis=AXIS) + tl.sum(x2 * x2, axis=AXIS)) / (2 * HALF) + eps)
    rstd = tl.expand_dims(rstd, AXIS)
    n1 = ((x1 * rstd).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
    n2 = ((x2 * rstd).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
    return (n1 * cos - n2 * sin).to(dtype), (n2 * cos + n1 * sin).to(dtype)


@triton.jit
def _qk_norm_rope_kernel(QKV, QW, KW, Pos, Cos, Sin, stride_t, stride_cos, num_heads, num_qk_heads, eps,
                         HALF: tl.constexpr, HEADS: tl.constexpr, PDL: tl.constexpr):
    """One program per token, all its q and k heads at once: rms_norm_rope, in place."""
    pdl.wait(PDL)
    token = tl.program_id(0)
    heads = tl.arange(0, HEADS)[:, None]  # [HEADS, 1]; the k heads follow the q heads in qkv
    cols = tl.arange(0, HALF)[None, :]  # [1, HALF]
    mask = heads < num_qk_heads
    base = QKV + token * stride_t + heads * 2 * HALF
    x1 = tl.load(base + cols, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF + cols, mask=mask, other=0.0).to(tl.float32)
    is_q = heads < num_heads
    w1 = tl.where(is_q, tl.load(QW + cols).to(tl.float32), tl.load(KW + cols).to(tl.float32))
    w2 = tl.where(is_q, tl.load(QW + HALF + cols).to(tl.float32), tl.load(KW + HALF + cols).to(tl.float32))
    dtype = QKV.dtype.element_ty
    pos = tl.load(Pos + token)
    c = tl.load(Cos + pos * stride_cos + cols).to(dtype).to(tl.float32)
    s = tl.load(Sin + pos * stride_cos + cols).to(dtype).to(tl.float32)
    o1, o2 = rms_norm_rope(x1, x2, w1, w2, c, s, eps, dtype, 1, HALF)
    tl.store(base + cols, o1, mask=mask)
    tl.store(base + HALF + cols, o2, mask=mask)


@triton.jit
def _silu_and_mul_kernel(X, Out, N, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl.wait(PDL)
    row, block = tl.program_id(0), tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    gate = tl.load(X + row * 2 * N + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(X + row * 2 * N + N + cols, mask=mask, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(Out.dtype.element_ty).to(tl.float32)
    tl.store(Out + row * N + cols, (silu * up).to(Out.dtype.element_ty), mask=mask)


POOL_MODES = {"mean": 0, "cls": 1, "lasttoken": 2}


@triton.jit
def _pool_kernel(H, Bounds, Out, stride_h, num_tokens, dim, MODE: tl.constexpr, BOUNDS_STRIDE: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, PDL: tl.constexpr):
    """Program (row, column block): the row's pooled BLOCK_C columns in float32. A row pools the tokens
    [Bounds[row * BOUNDS_STRIDE], Bounds[row * BOUNDS_STRIDE + 1]): a slot of cu_seqlens (stride 1) or a
    span of span_bounds [num_spans, 2] (stride 2). Many programs per row: with one per slot, a batch of one
    was pooled by one SM (MiniLM 1 x 128 mean: 13 us of a 170 us forward, H200)."""
    pdl.wait(PDL)
    row, block = tl.program_id(0), tl.program_id(1)
    start, end = tl.load(Bounds + row * BOUNDS_STRIDE), tl.load(Bounds + row * BOUNDS_STRIDE + 1)
    cols = block * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = cols < dim
    if MODE == 0:
        acc = tl.zeros([BLOCK_C], dtype=tl.float32)
        rows = tl.arange(0, BLOCK_T)
        for first in range(start, end, BLOCK_T):  # a tile of rows at a time, summed in a fixed order
            r = first + rows
            tile = tl.load(H + r[:, None] * stride_h + cols[None, :], mask=(r < end)[:, None] & mask[None, :],
                           other=0.0)
            acc += tl.sum(tile.to(tl.float32), axis=0)
        acc = acc / tl.maximum(end - start, 1).to(tl.float32)
    else:
        token = tl.minimum(start, num_tokens - 1) if MODE == 1 else tl.maximum(end - 1, 0)
        acc = tl.load(H + token * stride_h + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + row * dim + cols, acc, mask=mask)


@triton.jit
def _l2_normalize_kernel(X, dim, eps, BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl.wait(PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    x = tl.load(X + row * dim + cols, mask=mask, other=0.0)
    tl.store(X + row * dim + cols, x / tl.maximum(tl.sqrt(tl.sum(x * x, axis=0)), eps), mask=mask)


@triton.jit
def _token_layout_kernel(Cu, Positions, SeqIds, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Program per slot: its tokens' positions (0, 1, ...) and slot number."""
    pdl.wait(PDL)
    slot = tl.program_id(0)
    start, end = tl.load(Cu + slot), tl.load(Cu + slot + 1)
    offs = tl.arange(0, BLOCK)
    for first in range(start, end, BLOCK):
        t = first + offs
        tl.store(Positions + t, t - start, mask=t < end)
        tl.store(SeqIds + t, tl.zeros([BLOCK], dtype=tl.int32) + slot, mask=t < end)


POOL_BLOCK_C = 128  # columns per pooling program
POOL_BLOCK_T = 32  # rows per tile


def _pool_rows(hidden, bounds, num_rows: int, bounds_stride: int, mode: str, dim: int, normalize: bool):
    """[num_rows, dim] float32: row r pools hidden's rows [bounds[r * stride], bounds[r * stride + 1]) (_pool_kernel),
    truncated to dim columns, then L2-normalised in place."""
    out = torch.empty((num_rows, dim), dtype=torch.float32, device=hidden.device)
    launch = pdl.options(hidden)  # both kernels: gated on the batch's tokens
    _pool_kernel[(num_rows, triton.cdiv(dim, POOL_BLOCK_C))](
        hidden, bounds, out, hidden.stride(0), hidden.shape[0], dim, MODE=POOL_MODES[mode],
        BOUNDS_STRIDE=bounds_stride, BLOCK_T=POOL_BLOCK_T, BLOCK_C=POOL_BLOCK_C, **launch)
    if normalize:
        _l2_normalize_kernel[(num_rows,)](out, dim, 1e-12, BLOCK=triton.next_power_of_2(dim), **launch)
    return out


def _projection_args(x, bias):
    """The norm kernels' view of their input x: a projection's output [T, N], or its float32 partial sums [splits, T,
    N] (triton_split_k) with the projection's bias -> (tokens, N, row stride, plane stride, SPLITS, bias pointer)."""
    splits = x.shape[0] if x.dim() == 3 else 0
    plane = x.stride(0) if splits else 0
    return x.shape[-2], x.shape[-1], x.stride(-2), plane, splits, (bias if bias is not None else x)


def _add_layer_norm(x, bias, dtype, residual, weight, ln_bias, eps):
    """LayerNorm(x (+ bias, for partial sums) + residual) [T, N] in dtype (_add_layer_norm_kernel)."""
    num_tokens, n, stride_x, plane, splits, b = _projection_args(x, bias)
    out = torch.empty((num_tokens, n), dtype=dtype, device=x.device)
    r = residual if residual is not None else out
    _add_layer_norm_kernel[(num_tokens,)](x, b, r, weight, ln_bias, out, stride_x, plane, r.stride(0), n, eps,
                                          SPLITS=splits, HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None,
                                          BLOCK=triton.next_power_of_2(n), **pdl.options(out))
    return out


def _add_rms_norm(x, bias, dtype, residual, weight, eps):
    """(RMSNorm(s), s), s = x (+ bias, for partial sums) + residual [T, N] in dtype (_add_rms_norm_kernel)."""
    num_tokens, n, stride_x, plane, splits, b = _projection_args(x, bias)
    out = torch.empty((num_tokens, n), dtype=dtype, device=x.device)
    total = torch.empty_like(out)
    r = residual if residual is not None else out
    _add_rms_norm_kernel[(num_tokens,)](x, b, r, weight, out, total, stride_x, plane, r.stride(0), n, eps,
                                        SPLITS=splits, HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None,
                                        BLOCK=triton.next_power_of_2(n), **pdl.options(out))
    return out, total


class TritonOps:
    @staticmethod
    def token_layout(cu_seqlens, num_tokens: int):
        num_slots = cu_seqlens.shape[0] - 1
        positions = torch.empty(num_tokens, dtype=torch.int32, device=cu_seqlens.device)
        seq_ids = torch.empty_like(positions)
        _token_layout_kernel[(num_slots,)](cu_seqlens, positions, seq_ids, BLOCK=256, **pdl.options(positions))
        return positions, seq_ids

    @staticmethod
    def pool(hidden, cu_seqlens, seq_ids, mode: str, dim: int, normalize: bool):
        return _pool_rows(hidden, cu_seqlens, cu_seqlens.shape[0] - 1, 1, mode, dim, normalize)

    @staticmethod
    def pool_spans(hidden, span_bounds, mode: str, dim: int, normalize: bool):
        """All spans of a batch in one launch (a program per span and column block); span_bounds [num_spans, 2]
        int32, contiguous; mode mean | lasttoken (pooling.OutputSpec.check_span_pooling)."""
        return _pool_rows(hidden, span_bounds, span_bounds.shape[0], 2, mode, dim, normalize)

    @staticmethod
    def add_layer_norm(x, residual, weight, bias, eps):
        return _add_layer_norm(x, None, x.dtype, residual, weight, bias, eps)

    @staticmethod
    def linear_add_layer_norm(x, weight, bias, residual, ln_weight, ln_bias, eps):
        if triton_split_k.takes(x, weight):  # the partial sums, added up by the norm kernel
            return _add_layer_norm(triton_split_k.partials(x, weight), bias, x.dtype, residual, ln_weight, ln_bias, eps)
        return TritonOps.add_layer_norm(TritonOps.linear(x, weight, bias), residual, ln_weight, ln_bias, eps)

    @staticmethod
    def embed_layer_norm(input_ids, positions, token_type_ids, word, position, token_type, weight, bias, eps):
        num_tokens, n = input_ids.shape[0], word.shape[1]
        out = torch.empty((num_tokens, n), dtype=word.dtype, device=word.device)
        types = token_type_ids if token_type_ids is not None else input_ids
        _embed_layer_norm_kernel[(num_tokens,)](input_ids, positions, types, word, position, token_type, weight, bias,
                                                out, n, eps, HAS_TYPES=token_type_ids is not None,
                                                BLOCK=triton.next_power_of_2(n), **pdl.options(out))
        return out

    @staticmethod
    def add_rms_norm(x, residual, weight, eps):
        return _add_rms_norm(x, None, x.dtype, residual, weight, eps)

    @staticmethod
    def linear_add_rms_norm(x, weight, bias, residual, norm_weight, eps):
        if triton_split_k.takes(x, weight):  # the partial sums, added up by the norm kernel
            return _add_rms_norm(triton_split_k.partials(x, weight), bias, x.dtype, residual, norm_weight, eps)
        return TritonOps.add_rms_norm(TritonOps.linear(x, weight, bias), residual, norm_weight, eps)

    @staticmethod
    def qk_norm_rope(qkv, q_weight, k_weight, positions, cos, sin, num_heads, num_kv_heads, head_dim, eps):
        num_tokens = qkv.shape[0]
        num_qk_heads = num_heads + num_kv_heads
        _qk_norm_rope_kernel[(num_tokens,)](
            qkv, q_weight, k_weight, positions, cos, sin, qkv.stride(0), cos.stride(0), num_heads, num_qk_heads, eps,
            HALF=head_dim // 2, HEADS=triton.next_power_of_2(num_qk_heads), **pdl.options(qkv))
        q_size, kv_size = num_heads * head_dim, num_kv_heads * head_dim
        q = qkv[:, :q_size].view(num_tokens, num_heads, head_dim)
        k = qkv[:, q_size:q_size + kv_size].view(num_tokens, num_kv_heads, head_dim)
        v = qkv[:, q_size + kv_size:].view(num_tokens, num_kv_heads, head_dim)
        return q, k, v

    @staticmethod
    def linear(x, weight, bias=None):
        if triton_linear.fused_takes(x, weight, "identity", bias):
            return triton_linear.linear_act(x, weight, bias, "identity")
        return F.linear(x, weight, bias)

    @staticmethod
    def linear_act(x, weight, bias, act):
        if triton_linear.fused_takes(x, weight, act, bias):
            return triton_linear.linear_act(x, weight, bias, act)
        if (act in triton_linear.CUBLASLT_GELU and bias is not None and x.dim() == 2
                and x.dtype in (torch.float16, torch.bfloat16)):  # float32 keeps the exact form: the reference's
            return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)  # cuBLASLt's GELU_BIAS epilogue
        return ACTIVATIONS[act](F.linear(x, weight, bias))

    @staticmethod
    def linear_silu_mul(x, weight):
        if triton_linear.fused_takes(x, weight, "silu_mul"):
            return triton_linear.linear_silu_mul(x, weight)
        return TritonOps.silu_and_mul(F.linear(x, weight))

    @staticmethod
    def silu_and_mul(x):
        num_tokens, n = x.shape[0], x.shape[1] // 2
        out = torch.empty((num_tokens, n), dtype=x.dtype, device=x.device)
        block = min(1024, triton.next_power_of_2(n))
        _silu_and_mul_kernel[(num_tokens, triton.cdiv(n, block))](x, out, n, BLOCK=block, **pdl.options(x))
        return out
