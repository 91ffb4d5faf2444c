"""Pooling, Matryoshka truncation, L2 normalisation and output quantisation, shared by all models.

All of it runs on the device inside the forward pass (and so inside a CUDA graph), in float32;
`ops.pool` (kernels/ops.py) pools, truncates and normalises.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

OUTPUT_DTYPES = ("float32", "float16", "int8", "binary")


@dataclass(frozen=True)
class OutputSpec:
    pooling: str  # "mean" | "cls" | "lasttoken"
    normalize: bool
    dim: int  # after Matryoshka truncation
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in OUTPUT_DTYPES:
            raise ValueError(f"output dtype must be one of {', '.join(OUTPUT_DTYPES)}, not {self.dtype!r}")
        if self.dtype == "binary" and self.dim % 8:
            raise ValueError(f"binary output packs 8 dimensions a byte; dim {self.dim} is not a multiple of 8")

    @property
    def torch_dtype(self) -> torch.dtype:
        return {"float32": torch.float32, "float16": torch.float16, "int8": torch.int8, "binary": torch.uint8}[self.dtype]

    @property
    def numpy_dtype(self) -> type:
        return {"float32": np.float32, "float16": np.float16, "int8": np.int8, "binary": np.uint8}[self.dtype]

    @property
    def width(self) -> int:
        """Values per output row (binary: bytes of packed bits)."""
        return self.dim // 8 if self.dtype == "binary" else self.dim


class Pooler(nn.Module):
    """Pools, truncates, normalises and quantises: hidden [num_tokens, hidden] -> [num_seqs_padded, spec.width]."""

    def __init__(self, spec: OutputSpec, ops):
        super().__init__()
        self.spec, self.ops = spec, ops
        # bit weights for packing, first dimension in the most significant bit (as numpy.packbits)
        self.register_buffer("bit_weights", torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8),
                             persistent=False)

    def forward(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
        x = self.ops.pool(hidden, cu_seqlens, seq_ids, self.spec.pooling, self.spec.dim, self.spec.normalize)
        if self.spec.dtype == "int8":
            return torch.round(torch.tanh(x) * 127).to(torch.int8)  # round half to even
        if self.spec.dtype == "binary":
            bits = (x >= 0).view(x.shape[0], -1, 8).to(torch.uint8)
            return (bits * self.bit_weights).sum(-1, dtype=torch.uint8)
        return x.to(self.spec.torch_dtype)
