"""Ragged attention backends. A backend is chosen once, when the engine is built.

Every backend takes q [num_tokens, num_heads, head_dim] and k, v [num_tokens, num_kv_heads, head_dim]
of a packed batch and attends within each sequence only. `plan()` runs on the host once per batch,
before the forward pass, never inside it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class AttentionSpec:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    causal: bool

    @property
    def scale(self) -> float:
        return self.head_dim ** -0.5


@dataclass(frozen=True)
class QKNormRope:
    """Per-head RMSNorm of q and k, then rotate-half RoPE (Qwen3), for a backend to apply as it loads them
    (AttentionBackend.folds_qk_norm_rope): the norms' weights [head_dim], their eps, and the float32 RoPE tables
    [max_positions, head_dim] (layers.RotaryEmbedding). Positions restart in every sequence (ops.token_layout), so
    a row's position is its place in its sequence."""
    q_weight: torch.Tensor
    k_weight: torch.Tensor
    eps: float
    cos: torch.Tensor
    sin: torch.Tensor


class AttentionBackend:
    """Interface: plan(...) on the host once per batch, then forward(q, k, v) in every layer."""

    graph_safe = True  # whether forward() may be captured in a CUDA graph and replayed after a new plan()
    choice = None  # the AttentionChoice the engine was built with (what runs, and why): for logs and metrics
    # whether forward() takes qk_norm_rope for the planned batch (q and k as the projection left them); else the
    # model runs ops.qk_norm_rope first
    folds_qk_norm_rope = False

    def __init__(self, spec: AttentionSpec):
        self.spec = spec

    def graph_key(self, batch) -> tuple:
        """What a forward pass captured for this batch depends on: by default the batch's bucket,
        (padded tokens, padded sequences)."""
        return batch.key

    def plan(self, cu_seqlens: torch.Tensor, num_seqs: int, graph_key=None, device_cu_seqlens=None) -> None:
        """cu_seqlens: [num_seqs_padded + 1] int32 on the host; the first num_seqs are real.

        graph_key: the batch's `graph_key()` when it runs in a CUDA graph.
        device_cu_seqlens: the same offsets on the device (in the graph's static buffer).
        """
        raise NotImplementedError

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                qk_norm_rope: QKNormRope | None = None) -> torch.Tensor:
        """qk_norm_rope: given (and taken) only where folds_qk_norm_rope is true."""
        raise NotImplementedError


class TorchRaggedAttention(AttentionBackend):
    """Exact attention one sequence at a time with PyTorch SDPA (the CPU backend).

    Padding rows (past the last real sequence) are zeros: they never reach a real output. Its
    Python loop is fixed at capture time, so it cannot run inside a replayed graph.
    """

    graph_safe = False

    def plan(self, cu_seqlens: torch.Tensor, num_seqs: int, graph_key=None, device_cu_seqlens=None) -> None:
        bounds = cu_seqlens[: num_seqs + 1].tolist()
        self.spans = list(zip(bounds[:-1], bounds[1:]))

    def forward(self, q, k, v):
        out = torch.zeros_like(q)
        gqa = self.spec.num_heads != self.spec.num_kv_heads
        for start, end in self.spans:
            # [heads, seq_len, head_dim] per sequence
            qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=self.spec.causal, enable_gqa=gqa)
            out[start:end] = o.transpose(0, 1)
        return out
