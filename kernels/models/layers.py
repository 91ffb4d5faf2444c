"""Layers shared by the model families. Activations are [num_tokens, ...]: no batch dimension."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from embedpipe.kernels.activations import ACTIVATIONS


def activation_name(cfg: dict) -> str:
    """config.json's hidden_act (default gelu), checked against the activations ops.linear_act computes."""
    name = cfg.get("hidden_act", "gelu")
    if name not in ACTIVATIONS:
        raise ValueError(f"unsupported hidden_act {name!r}; supported: {', '.join(ACTIVATIONS)}")
    return name


def float32_linear(x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
    """A scoring head's matmul in float32 (x: pooled float32 rows; layer: an nn.Linear or CheckpointRows): a score's
    last digits order the documents, and a head is a few rows per sequence, nothing beside the encoder."""
    bias = None if getattr(layer, "bias", None) is None else layer.bias.float()
    return F.linear(x, layer.weight.float(), bias)


class PackedLinear(nn.Linear):
    """One matmul for several checkpoint projections (q/k/v, gate/up), stacked on the output dim.

    `shards` maps each checkpoint name to (offset, size) rows of the fused weight; the loader
    copies each checkpoint tensor into its rows.
    """

    def __init__(self, in_features: int, shard_sizes: dict[str, int], bias: bool):
        super().__init__(in_features, sum(shard_sizes.values()), bias=bias)
        offsets, start = {}, 0
        for name, size in shard_sizes.items():
            offsets[name] = (start, size)
            start += size
        self.shards = offsets


class CheckpointRows(nn.Module):
    """A few rows of a checkpoint matrix: `weight` [len(rows), in_features] is rows `rows` of the checkpoint tensor
    named `source` (the loader selects them). Qwen3-Reranker's head is the "no" and "yes" rows of lm_head.weight
    [vocab, hidden]: the last token's two logits are two dot products, never the whole vocabulary's."""

    def __init__(self, source: str, rows: tuple[int, ...], in_features: int):
        super().__init__()
        self.source, self.rows = source, tuple(rows)
        self.weight = nn.Parameter(torch.empty(len(self.rows), in_features))


class Embedding(nn.Embedding):
    """nn.Embedding without its random init: the loader fills every weight from the checkpoint.

    (The init is wasted work, and on the meta device normal_ imports torch._dynamo: ~1 s of every
    job's start-up.)
    """

    def reset_parameters(self) -> None:
        pass


class LayerNorm(nn.LayerNorm):
    """LayerNorm; torch accumulates its statistics in float32 for half inputs on CPU and CUDA."""


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm parameters; the math is `ops.add_rms_norm` (kernels/ops.py)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps


class RotaryEmbedding(nn.Module):
    """Rotate-half RoPE tables [max_positions, head_dim], computed in float32 once; `ops.qk_norm_rope` applies them."""

    def __init__(self, head_dim: int, max_positions: int, theta: float):
        super().__init__()
        self.head_dim, self.max_positions, self.theta = head_dim, max_positions, theta
        self.register_buffer("cos", torch.empty(max_positions, head_dim), persistent=False)
        self.register_buffer("sin", torch.empty(max_positions, head_dim), persistent=False)
        if self.cos.device.type != "meta":
            self.rebuild_buffers()

    def rebuild_buffers(self) -> None:
        inv_freq = 1.0 / self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        freqs = torch.outer(torch.arange(self.max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)  # [max_positions, head_dim]
        self.cos = emb.cos().to(self.cos.device)
        self.sin = emb.sin().to(self.sin.device)
