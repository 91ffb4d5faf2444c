"""Pooling, Matryoshka truncation, L2 normalisation and output quantisation, shared by all models.

All of it runs on the device inside the forward pass (and so inside a CUDA graph), in float32;
`ops.pool` (kernels/ops.py) pools, truncates and normalises. Late chunking pools token spans of a
sequence instead (`ops.pool_spans`), then truncates, normalises and quantises the same way. A reranker's
engine scores instead (ScoreHead): the same pooling picks each sequence's CLS or last token for its head.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from embedpipe.kernels.output_dtypes import output_dtype

# poolings that mean something for a span of a sequence: CLS pools the sequence's first token, which no
# window but the first holds
SPAN_POOLINGS = ("mean", "lasttoken")
# a reranker's activation on its head's logit (model_folder.SCORE_ACTIVATIONS names them)
SCORE_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"sigmoid": torch.sigmoid,
                                                                        "identity": lambda logits: logits}


@dataclass(frozen=True)
class OutputSpec:
    pooling: str  # "mean" | "cls" | "lasttoken"
    normalize: bool
    dim: int  # after Matryoshka truncation
    dtype: str = "float32"

    def __post_init__(self):
        stored = output_dtype(self.dtype)  # raises for an unknown name
        if stored.packed_bits and self.dim % 8:
            raise ValueError(f"binary output packs 8 dimensions a byte; dim {self.dim} is not a multiple of 8")

    @property
    def numpy_dtype(self) -> type:
        return output_dtype(self.dtype).numpy

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, output_dtype(self.dtype).numpy.__name__)  # float32, float16, int8, uint8

    @property
    def width(self) -> int:
        """Values per output row (binary: bytes of packed bits)."""
        return output_dtype(self.dtype).width(self.dim)

    def check_span_pooling(self) -> None:
        """Raises ValueError unless this output can pool spans (late chunking). A caller checks up front with
        engine.model_spec(config).output (no weights loaded); Engine.step checks each batch with spans."""
        if self.pooling not in SPAN_POOLINGS:
            raise ValueError(f"late chunking needs mean or last-token pooling; this model pools by {self.pooling!r} "
                             "(pooling=\"mean\" overrides it)")


class Pooler(nn.Module):
    """Pools, truncates, normalises and quantises: hidden [num_tokens, hidden] -> [num_seqs_padded, spec.width]
    (forward), or -> [num_spans, spec.width] (spans).

    The quantisation is output_dtypes.OutputDtype.quantise's, on the device (a test holds them equal)."""

    def __init__(self, spec: OutputSpec, ops):
        super().__init__()
        self.spec, self.ops = spec, ops
        # bit weights for packing, first dimension in the most significant bit (as numpy.packbits)
        self.register_buffer("bit_weights", torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8),
                             persistent=False)

    def forward(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
        return self._quantise(self.ops.pool(hidden, cu_seqlens, seq_ids, self.spec.pooling, self.spec.dim,
                                            self.spec.normalize))

    def spans(self, hidden: torch.Tensor, span_bounds: torch.Tensor) -> torch.Tensor:
        """span_bounds [num_spans, 2] int32, [start, end) rows of hidden -> [num_spans, spec.width]: each span's
        tokens pooled as a sequence's are (their mean, or the last one), from the hidden states of their whole
        sequence (late chunking)."""
        return self._quantise(self.ops.pool_spans(hidden, span_bounds, self.spec.pooling, self.spec.dim,
                                                  self.spec.normalize))

    def _quantise(self, x: torch.Tensor) -> torch.Tensor:
        """float32 [rows, dim] (pooled, truncated, normalised) -> [rows, spec.width] in the output dtype."""
        if self.spec.dtype == "int8":
            return torch.round(torch.tanh(x) * 127).to(torch.int8)  # round half to even
        if self.spec.dtype == "binary":
            bits = (x >= 0).view(x.shape[0], -1, 8).to(torch.uint8)
            return (bits * self.bit_weights).sum(-1, dtype=torch.uint8)
        return x.to(self.spec.torch_dtype)


class ScoreHead(nn.Module):
    """A reranker's output: hidden [num_tokens, hidden] -> [num_seqs_padded, 1] float32 scores. Each sequence's one
    token (spec.pooling: "cls" or "lasttoken", picked by ops.pool as a Pooler picks it) goes through the model's
    `score(pooled [rows, hidden] float32) -> logits [rows, 1]`, then the activation; no other token reaches the
    head (Qwen3-Reranker's lm_head never runs over every token or the whole vocabulary)."""

    def __init__(self, spec: OutputSpec, score: Callable[[torch.Tensor], torch.Tensor], activation: str, ops):
        super().__init__()
        self.spec, self.score, self.ops = spec, score, ops
        self.activation = SCORE_ACTIVATIONS[activation]

    def forward(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
        pooled = self.ops.pool(hidden, cu_seqlens, seq_ids, self.spec.pooling, hidden.shape[1], False)
        return self.activation(self.score(pooled))
