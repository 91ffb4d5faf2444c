"""BERT family (all-MiniLM, BGE, E5) and (XLM-)RoBERTa: post-LayerNorm encoders, absolute positions; and their
cross-encoders (`*ForSequenceClassification`: a classifier head on the CLS token).

Parameter names follow the Hugging Face checkpoints; query/key/value load into one fused `qkv`.
"""
from __future__ import annotations

import torch
from torch import nn

from embedpipe.kernels.attention import AttentionBackend, AttentionSpec
from embedpipe.kernels.models.layers import Embedding, LayerNorm, PackedLinear, activation_name, float32_linear


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: dict, position_offset: int, ops):
        super().__init__()
        self.ops = ops
        hidden = cfg["hidden_size"]
        self.word_embeddings = Embedding(cfg["vocab_size"], hidden)
        self.position_embeddings = Embedding(cfg["max_position_embeddings"], hidden)
        self.token_type_embeddings = Embedding(cfg.get("type_vocab_size", 2), hidden)
        self.LayerNorm = LayerNorm(hidden, eps=cfg["layer_norm_eps"])
        self.position_offset = position_offset  # XLM-R counts positions from padding_idx + 1

    def forward(self, input_ids, positions, token_type_ids=None):
        """One fused op (ops.embed_layer_norm): the gathers, adds and LayerNorm took ~7 kernels."""
        ln = self.LayerNorm
        if self.position_offset:
            positions = positions + self.position_offset
        return self.ops.embed_layer_norm(input_ids, positions, token_type_ids, self.word_embeddings.weight,
                                         self.position_embeddings.weight, self.token_type_embeddings.weight,
                                         ln.weight, ln.bias, ln.eps)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, num_heads: int, ops):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden // num_heads
        self.qkv = PackedLinear(hidden, {"query": hidden, "key": hidden, "value": hidden}, bias=True)
        self.ops = ops

    def forward(self, x, attn: AttentionBackend):
        qkv = self.ops.linear(x, self.qkv.weight, self.qkv.bias)
        q, k, v = qkv.view(x.shape[0], 3, self.num_heads, self.head_dim).unbind(1)
        return attn.forward(q, k, v).reshape(x.shape[0], -1)


class DenseLayerNorm(nn.Module):
    """`LayerNorm(residual + dense(x))`: BERT's post-LN output blocks."""

    def __init__(self, in_features: int, hidden: int, eps: float, ops):
        super().__init__()
        self.dense = nn.Linear(in_features, hidden)
        self.LayerNorm = LayerNorm(hidden, eps=eps)
        self.ops = ops

    def forward(self, x, residual):
        ln = self.LayerNorm
        return self.ops.linear_add_layer_norm(x, self.dense.weight, self.dense.bias, residual, ln.weight, ln.bias,
                                              ln.eps)


class BertAttention(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        self.self = BertSelfAttention(cfg["hidden_size"], cfg["num_attention_heads"], ops)
        self.output = DenseLayerNorm(cfg["hidden_size"], cfg["hidden_size"], cfg["layer_norm_eps"], ops)

    def forward(self, x, attn):
        return self.output(self.self(x, attn), x)


class BertIntermediate(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        self.dense = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"])
        self.act = activation_name(cfg)
        self.ops = ops

    def forward(self, x):
        return self.ops.linear_act(x, self.dense.weight, self.dense.bias, self.act)


class BertLayer(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        self.attention = BertAttention(cfg, ops)
        self.intermediate = BertIntermediate(cfg, ops)
        self.output = DenseLayerNorm(cfg["intermediate_size"], cfg["hidden_size"], cfg["layer_norm_eps"], ops)

    def forward(self, x, attn):
        h = self.attention(x, attn)
        return self.output(self.intermediate(h), h)


class BertEncoder(nn.Module):
    def __init__(self, cfg: dict, ops):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(cfg, ops) for _ in range(cfg["num_hidden_layers"]))


class BertModel(nn.Module):
    """forward(input_ids [T], positions [T], token_type_ids [T] | None) -> hidden [T, hidden]."""

    checkpoint_prefixes = ("bert.", "roberta.", "model.")

    def __init__(self, cfg: dict, attn: AttentionBackend, ops, position_offset: int = 0):
        super().__init__()
        self.embeddings = BertEmbeddings(cfg, position_offset, ops)
        self.encoder = BertEncoder(cfg, ops)
        self.attn = attn

    @classmethod
    def from_folder(cls, folder, attn: AttentionBackend, ops) -> BertModel:
        """The model of a ModelFolder's config (XLM-RoBERTa's too: it takes the same arguments)."""
        return cls(folder.config, attn, ops)

    @staticmethod
    def attention_spec(cfg: dict) -> AttentionSpec:
        heads = cfg["num_attention_heads"]
        return AttentionSpec(heads, heads, cfg["hidden_size"] // heads, causal=False)

    def forward(self, input_ids, positions, token_type_ids=None):
        x = self.embeddings(input_ids, positions, token_type_ids)
        for layer in self.encoder.layer:
            x = layer(x, self.attn)
        return x


class XLMRobertaModel(BertModel):
    """BERT layers; positions start at padding_idx + 1, one token type."""

    def __init__(self, cfg: dict, attn: AttentionBackend, ops):
        super().__init__(cfg, attn, ops, position_offset=int(cfg.get("pad_token_id", 1)) + 1)


class BertPooler(nn.Module):
    """`bert.pooler`: tanh(dense(CLS))."""

    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, cls):
        return torch.tanh(float32_linear(cls, self.dense))


class BertCrossEncoder(nn.Module):
    """BertForSequenceClassification: forward -> hidden [T, hidden] as BertModel's (with the pair's token types);
    score(cls [rows, hidden] float32) -> logits [rows, 1]: classifier(pooler(CLS)). Dropout is off at inference."""

    checkpoint_prefixes = ()  # the checkpoint's own names: bert.*, classifier.*
    attention_spec = staticmethod(BertModel.attention_spec)

    def __init__(self, cfg: dict, attn: AttentionBackend, ops):
        super().__init__()
        self.bert = BertModel(cfg, attn, ops)
        self.bert.pooler = BertPooler(cfg["hidden_size"])
        self.classifier = nn.Linear(cfg["hidden_size"], 1)

    @classmethod
    def from_folder(cls, folder, attn: AttentionBackend, ops):
        return cls(folder.config, attn, ops)

    def forward(self, input_ids, positions, token_type_ids=None):
        return self.bert(input_ids, positions, token_type_ids)

    def score(self, cls):
        return float32_linear(self.bert.pooler(cls), self.classifier)


class RobertaClassificationHead(nn.Module):
    """`classifier` of (XLM-)RoBERTa's sequence classification: out_proj(tanh(dense(CLS)))."""

    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, 1)

    def forward(self, cls):
        return float32_linear(torch.tanh(float32_linear(cls, self.dense)), self.out_proj)


class XLMRobertaCrossEncoder(nn.Module):
    """(XLM-)RobertaForSequenceClassification (bge-reranker, mxbai-rerank): XLM-R layers, then
    RobertaClassificationHead on CLS; score(cls [rows, hidden] float32) -> logits [rows, 1]."""

    checkpoint_prefixes = ()  # roberta.*, classifier.*
    attention_spec = staticmethod(BertModel.attention_spec)

    def __init__(self, cfg: dict, attn: AttentionBackend, ops):
        super().__init__()
        self.roberta = XLMRobertaModel(cfg, attn, ops)
        self.classifier = RobertaClassificationHead(cfg["hidden_size"])

    @classmethod
    def from_folder(cls, folder, attn: AttentionBackend, ops):
        return cls(folder.config, attn, ops)

    def forward(self, input_ids, positions, token_type_ids=None):
        return self.roberta(input_ids, positions, token_type_ids)

    def score(self, cls):
        return self.classifier(cls)
