"""Qwen3 family: Qwen3-Embedding (causal, last-token) and pplx-embed (bidirectional, mean).

Pre-norm RMSNorm blocks, grouped-query attention with per-head q/k RMSNorm before RoPE, SwiGLU.
Parameter names follow the Hugging Face checkpoints; q/k/v and gate/up load into fused matmuls.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from .attention import AttentionBackend, AttentionSpec
from .layers import PackedLinear, RMSNorm, RotaryEmbedding, apply_rotary


def _head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def _rope_theta(cfg: dict) -> float:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return float(params.get("rope_theta", cfg.get("rope_theta", 1_000_000.0)))


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.num_heads, self.num_kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = _head_dim(cfg)
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        bias = cfg.get("attention_bias", False)
        self.qkv_proj = PackedLinear(cfg["hidden_size"], {"q_proj": q_size, "k_proj": kv_size, "v_proj": kv_size}, bias)
        self.o_proj = nn.Linear(q_size, cfg["hidden_size"], bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])

    def forward(self, x, rope, attn: AttentionBackend):
        num_tokens = x.shape[0]
        q, k, v = self.qkv_proj(x).split(
            [self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, self.num_kv_heads * self.head_dim], -1)
        q = self.q_norm(q.view(num_tokens, self.num_heads, self.head_dim))
        k = self.k_norm(k.view(num_tokens, self.num_kv_heads, self.head_dim))
        q, k = apply_rotary(q, k, *rope)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        return self.o_proj(attn.forward(q, k, v).reshape(num_tokens, -1))


class Qwen3MLP(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        inter = cfg["intermediate_size"]
        self.gate_up_proj = PackedLinear(cfg["hidden_size"], {"gate_proj": inter, "up_proj": inter}, bias=False)
        self.down_proj = nn.Linear(inter, cfg["hidden_size"], bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Qwen3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = Qwen3MLP(cfg)

    def forward(self, x, rope, attn):
        x = x + self.self_attn(self.input_layernorm(x), rope, attn)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    """forward(input_ids [T], positions [T]) -> hidden [T, hidden]; positions restart per sequence."""

    checkpoint_prefixes = ("model.",)

    def __init__(self, cfg: dict, attn: AttentionBackend, max_positions: int):
        super().__init__()
        self.rotary = RotaryEmbedding(_head_dim(cfg), max_positions, _rope_theta(cfg))
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.attn = attn

    @staticmethod
    def attention_spec(cfg: dict) -> AttentionSpec:
        causal = not cfg.get("use_bidirectional_attention", False)
        return AttentionSpec(cfg["num_attention_heads"], cfg["num_key_value_heads"], _head_dim(cfg), causal)

    def forward(self, input_ids, positions, token_type_ids=None):
        x = self.embed_tokens(input_ids)
        rope = self.rotary(positions)  # cos, sin: [num_tokens, 1, head_dim], shared by all layers
        for layer in self.layers:
            x = layer(x, rope, self.attn)
        return self.norm(x)
