"""Element-wise and normalisation ops of the model families, behind one interface.

`TorchOps` is the reference (plain PyTorch; the CPU path). On CUDA, `TritonOps` fuses each op
into one kernel (kernels/cuda/triton_ops.py). The engine picks one when it builds the model.
Shapes are packed: [num_tokens, ...], no batch dimension.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from embedpipe.kernels.activations import ACTIVATIONS


class TorchOps:
    @staticmethod
    def token_layout(cu_seqlens, num_tokens: int):
        """cu_seqlens [slots + 1] int32 -> positions [num_tokens] (restarting at 0 in every sequence) and seq_ids
        [num_tokens] (each token's slot), int32. Computed where the model runs (inside its CUDA graph), so the host
        stages ids and cu_seqlens only: numpy took ~13 us of every batch-1 step's host time (H200 host)."""
        tokens = torch.arange(num_tokens, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
        # empty slots repeat their offset: the count of ends <= t is the slot that holds token t
        seq_ids = torch.searchsorted(cu_seqlens[1:], tokens, right=True, out_int32=True)
        return tokens - cu_seqlens[seq_ids], seq_ids

    @staticmethod
    def add_layer_norm(x, residual, weight, bias, eps):
        """LayerNorm(x + residual): BERT's post-LN sub-layer output. residual may be None."""
        if residual is not None:
            x = x + residual
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    @staticmethod
    def linear_add_layer_norm(x, weight, bias, residual, ln_weight, ln_bias, eps):
        """LayerNorm(x @ weight.T + bias + residual): BERT's output projections and the post-LN after them. x [T, K],
        weight [N, K] -> [T, N]."""
        return TorchOps.add_layer_norm(F.linear(x, weight, bias), residual, ln_weight, ln_bias, eps)

    @staticmethod
    def embed_layer_norm(input_ids, positions, token_type_ids, word, position, token_type, weight, bias, eps):
        """BERT's embeddings: LayerNorm(word[ids] + token_type[types] + position[positions]), added in that order
        in the activation dtype (transformers' order); token_type_ids None: type 0 everywhere. -> [T, hidden]."""
        types = token_type[0] if token_type_ids is None else token_type[token_type_ids]
        x = (word[input_ids] + types) + position[positions]
        return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    @staticmethod
    def add_rms_norm(x, residual, weight, eps):
        """Qwen3 pre-norm step: s = x + residual (or x); returns (RMSNorm(s), s). Statistics in float32."""
        if residual is not None:
            x = x + residual
        return _rms_norm(x, weight, eps), x

    @staticmethod
    def linear_add_rms_norm(x, weight, bias, residual, norm_weight, eps):
        """add_rms_norm(x @ weight.T + bias, residual): Qwen3's o_proj / down_proj and the RMSNorm after them. x [T, K],
        weight [N, K] -> (normed [T, N], sum [T, N])."""
        return TorchOps.add_rms_norm(F.linear(x, weight, bias), residual, norm_weight, eps)

    @staticmethod
    def qk_norm_rope(qkv, q_weight, k_weight, positions, cos, sin, num_heads, num_kv_heads, head_dim, eps):
        """qkv [T, (H + 2 * Hkv) * D] -> q [T, H, D], k [T, Hkv, D] (per-head RMSNorm, then RoPE), v [T, Hkv, D]."""
        num_tokens = qkv.shape[0]
        q, k, v = qkv.split([num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], -1)
        q = _rms_norm(q.view(num_tokens, num_heads, head_dim), q_weight, eps)
        k = _rms_norm(k.view(num_tokens, num_kv_heads, head_dim), k_weight, eps)
        cos = cos[positions].unsqueeze(1).to(q.dtype)  # [T, 1, D]
        sin = sin[positions].unsqueeze(1).to(q.dtype)
        return _rope(q, cos, sin), _rope(k, cos, sin), v.view(num_tokens, num_kv_heads, head_dim)

    @staticmethod
    def pool(hidden, cu_seqlens, seq_ids, mode: str, dim: int, normalize: bool):
        """hidden [T, hidden] -> [num_slots, dim] float32: pooled (mean | cls | lasttoken), truncated, normalised.

        seq_ids [T] is each token's slot. Empty slots are padding and never returned.
        """
        num_tokens = hidden.shape[0]
        if mode == "mean":
            # an averaging matrix [num_slots, T]: one deterministic matmul (index_add_ on CUDA uses atomics)
            slots = torch.arange(cu_seqlens.shape[0] - 1, device=hidden.device, dtype=seq_ids.dtype)
            lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).clamp(min=1)
            pooled = ((seq_ids[None, :] == slots[:, None]).float() / lengths[:, None]) @ hidden.float()
        elif mode == "cls":
            pooled = hidden[cu_seqlens[:-1].clamp(max=num_tokens - 1)].float()
        elif mode == "lasttoken":
            pooled = hidden[(cu_seqlens[1:] - 1).clamp(min=0)].float()
        else:
            raise ValueError(f"unknown pooling mode {mode!r}")
        return _truncate_normalize(pooled, dim, normalize)

    @staticmethod
    def pool_spans(hidden, span_bounds, mode: str, dim: int, normalize: bool):
        """hidden [T, hidden], span_bounds [num_spans, 2] int32 ([start, end) rows of hidden, non-empty) ->
        [num_spans, dim] float32: each span pooled (mean | lasttoken), truncated, normalised, as `pool` a slot."""
        starts, ends = span_bounds.long().unbind(1)
        if mode == "mean":
            # spans may overlap: an averaging matrix [num_spans, T] of their ranges, as `pool`'s of slots
            tokens = torch.arange(hidden.shape[0], device=hidden.device)
            inside = (tokens[None, :] >= starts[:, None]) & (tokens[None, :] < ends[:, None])
            pooled = (inside.float() / (ends - starts)[:, None]) @ hidden.float()
        elif mode == "lasttoken":
            pooled = hidden[ends - 1].float()
        else:
            raise ValueError(f"spans pool by mean or lasttoken, not {mode!r}")
        return _truncate_normalize(pooled, dim, normalize)

    @staticmethod
    def linear(x, weight, bias=None):
        """x @ weight.T + bias: a layer's plain projections (QKV, attention output, down). x [T, K], weight [N, K]
        -> [T, N]."""
        return F.linear(x, weight, bias)

    @staticmethod
    def linear_act(x, weight, bias, act: str):
        """act(x @ weight.T + bias): a feed-forward block's first matmul and its activation (act: an ACTIVATIONS
        name). x [T, K], weight [N, K] -> [T, N]."""
        return ACTIVATIONS[act](F.linear(x, weight, bias))

    @staticmethod
    def linear_silu_mul(x, weight):
        """x [T, K], weight [2 * I, K] (gate rows, then up rows) -> silu(x @ gate.T) * (x @ up.T) [T, I]."""
        return TorchOps.silu_and_mul(F.linear(x, weight))

    @staticmethod
    def silu_and_mul(x):
        """[T, 2 * I] -> silu(x[:, :I]) * x[:, I:]."""
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def _truncate_normalize(pooled, dim: int, normalize: bool):
    """Matryoshka truncation to the first dim columns, then L2 normalisation: [rows, hidden] -> [rows, dim]."""
    pooled = pooled[:, :dim]
    return F.normalize(pooled, dim=-1) if normalize else pooled


def _rms_norm(x, weight, eps):
    """The transformers order: normalise in float32, cast back, then scale."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def make_ops(device: torch.device):
    if device.type == "cuda":
        from embedpipe.kernels.cuda.triton_ops import TritonOps
        return TritonOps
    return TorchOps
