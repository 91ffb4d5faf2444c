"""Qwen3 family: Qwen3-Embedding (causal, last-token), pplx-embed (bidirectional, mean) and Qwen3-Reranker (causal,
scored by the last token's "yes" / "no" logits).

Pre-norm RMSNorm blocks, grouped-query attention with per-head q/k RMSNorm before RoPE, SwiGLU.
Parameter names follow the Hugging Face checkpoints; q/k/v and gate/up load into fused matmuls.
The residual stream travels beside the hidden state so each add fuses into the next norm, and each projection before
a norm runs with it (ops.linear_add_rms_norm).
"""
from __future__ import annotations

from torch import nn

from embedpipe.kernels.attention import AttentionBackend, AttentionSpec, QKNormRope
from embedpipe.kernels.models.layers import (CheckpointRows, Embedding, PackedLinear, RMSNorm, RotaryEmbedding,
                                             float32_linear)
from embedpipe.kernels.models.model_folder import ModelLoadError


def _head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def _rope_theta(cfg: dict) -> float:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return float(params.get("rope_theta", cfg.get("rope_theta", 1_000_000.0)))


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        self.num_heads, self.num_kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.head_dim = _head_dim(cfg)
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        bias = cfg.get("attention_bias", False)
        self.qkv_proj = PackedLinear(cfg["hidden_size"], {"q_proj": q_size, "k_proj": kv_size, "v_proj": kv_size}, bias)
        self.o_proj = nn.Linear(q_size, cfg["hidden_size"], bias=bias)
        self.q_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        self.k_norm = RMSNorm(self.head_dim, cfg["rms_norm_eps"])
        self.ops = ops

    def forward(self, x, positions, rotary: RotaryEmbedding, attn: AttentionBackend):
        """x [T, hidden] -> the attention's output before o_proj [T, H * D] (o_proj runs with the norm after it).
        The q/k norms and RoPE run in the attention kernel where the backend folds them, else before it."""
        # q [T, H, D], k and v [T, Hkv, D]
        qkv = self.ops.linear(x, self.qkv_proj.weight, self.qkv_proj.bias)
        if attn.folds_qk_norm_rope:
            q, k, v = qkv.split([self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim,
                                 self.num_kv_heads * self.head_dim], -1)
            heads = (x.shape[0], -1, self.head_dim)
            fold = QKNormRope(self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, rotary.cos, rotary.sin)
            return attn.forward(q.view(heads), k.view(heads), v.view(heads), qk_norm_rope=fold).reshape(x.shape[0], -1)
        q, k, v = self.ops.qk_norm_rope(qkv, self.q_norm.weight, self.k_norm.weight, positions, rotary.cos, rotary.sin,
                                        self.num_heads, self.num_kv_heads, self.head_dim, self.q_norm.eps)
        return attn.forward(q, k, v).reshape(x.shape[0], -1)


class Qwen3MLP(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        inter = cfg["intermediate_size"]
        self.gate_up_proj = PackedLinear(cfg["hidden_size"], {"gate_proj": inter, "up_proj": inter}, bias=False)
        self.down_proj = nn.Linear(inter, cfg["hidden_size"], bias=False)
        self.ops = ops

    def forward(self, x):
        """x [T, hidden] -> the MLP's output before down_proj [T, intermediate] (down_proj runs with the norm after
        it)."""
        return self.ops.linear_silu_mul(x, self.gate_up_proj.weight)


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Qwen3Attention(cfg, ops)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = Qwen3MLP(cfg, ops)
        self.ops = ops

    def forward(self, h, residual, next_norm: RMSNorm, positions, rotary, attn):
        """h: this layer's input after its input_layernorm; residual: the input itself. Returns (the layer's output
        after next_norm: the next layer's input_layernorm, or the model's final norm; the output itself). Each
        projection runs with the add and the norm after it (ops.linear_add_rms_norm)."""
        o, norm = self.self_attn.o_proj, self.post_attention_layernorm
        h, residual = self.ops.linear_add_rms_norm(self.self_attn(h, positions, rotary, attn), o.weight, o.bias,
                                                   residual, norm.weight, norm.eps)
        down = self.mlp.down_proj
        return self.ops.linear_add_rms_norm(self.mlp(h), down.weight, down.bias, residual, next_norm.weight,
                                            next_norm.eps)


class Qwen3Model(nn.Module):
    """forward(input_ids [T], positions [T]) -> hidden [T, hidden]; positions restart per sequence."""

    checkpoint_prefixes = ("model.",)

    def __init__(self, cfg: dict, attn: AttentionBackend, ops, max_positions: int):
        super().__init__()
        self.rotary = RotaryEmbedding(_head_dim(cfg), max_positions, _rope_theta(cfg))
        self.embed_tokens = Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg, ops) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.attn, self.ops = attn, ops

    @classmethod
    def from_folder(cls, folder, attn: AttentionBackend, ops) -> Qwen3Model:
        """The model of a ModelFolder's config; its rotary table covers the folder's positions."""
        return cls(folder.config, attn, ops, int(folder.config.get("max_position_embeddings", folder.max_seq_length)))

    @staticmethod
    def attention_spec(cfg: dict) -> AttentionSpec:
        causal = not cfg.get("use_bidirectional_attention", False)
        return AttentionSpec(cfg["num_attention_heads"], cfg["num_key_value_heads"], _head_dim(cfg), causal)

    def forward(self, input_ids, positions, token_type_ids=None):
        first = self.layers[0].input_layernorm
        h, residual = self.ops.add_rms_norm(self.embed_tokens(input_ids), None, first.weight, first.eps)
        next_norms = [layer.input_layernorm for layer in self.layers[1:]] + [self.norm]
        for layer, next_norm in zip(self.layers, next_norms):
            h, residual = layer(h, residual, next_norm, positions, self.rotary, self.attn)
        return h


class Qwen3Reranker(Qwen3Model):
    """Qwen3-Reranker (a Qwen3ForCausalLM folder): Qwen3Model's hidden states, and score(last [rows, hidden]
    float32) -> [rows, 1]: logit("yes") - logit("no") of each sequence's last token, through lm_head's two rows
    (CheckpointRows; the embedding table's when tie_word_embeddings). The engine's sigmoid of it is the model card's
    log_softmax([no, yes])[1].exp() = P(yes), and sentence-transformers' LogitScore then Sigmoid."""

    def __init__(self, cfg: dict, attn: AttentionBackend, ops, max_positions: int, label_token_ids: tuple[int, int]):
        super().__init__(cfg, attn, ops, max_positions)
        if max(label_token_ids) >= cfg["vocab_size"]:
            raise ModelLoadError(f"the tokens 'no' and 'yes' (ids {label_token_ids}) are outside the model's "
                                 f"vocabulary of {cfg['vocab_size']}")
        source = "embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
        self.lm_head = CheckpointRows(source, label_token_ids, cfg["hidden_size"])  # rows: [no, yes]

    @classmethod
    def from_folder(cls, folder, attn: AttentionBackend, ops) -> Qwen3Reranker:
        positions = int(folder.config.get("max_position_embeddings", folder.max_seq_length))
        return cls(folder.config, attn, ops, positions, folder.scorer.label_token_ids)

    def score(self, last):
        no, yes = float32_linear(last, self.lm_head).unbind(1)
        return (yes - no)[:, None]
