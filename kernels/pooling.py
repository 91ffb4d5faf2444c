"""Pooling, Matryoshka truncation, L2 normalisation and output quantisation, shared by all models.

All of it runs on the device inside the forward pass (and so inside a CUDA graph), in float32.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
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


def pool(hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_ids: torch.Tensor, mode: str) -> torch.Tensor:
    """hidden [num_tokens, hidden] -> [num_seqs_padded, hidden] float32.

    seq_ids [num_tokens] gives each token's sequence slot. Empty slots give zeros (mean) or an
    arbitrary row (cls, last): they are padding and never returned.
    """
    num_tokens = hidden.shape[0]
    if mode == "mean":
        # a [num_slots, num_tokens] averaging matrix: one deterministic matmul (index_add_ on CUDA
        # sums with atomics, in no fixed order)
        num_slots = cu_seqlens.shape[0] - 1
        slots = torch.arange(num_slots, device=hidden.device, dtype=seq_ids.dtype)
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).clamp(min=1)
        weights = (seq_ids[None, :] == slots[:, None]).float() / lengths[:, None]
        return weights @ hidden.float()
    if mode == "cls":
        return hidden[cu_seqlens[:-1].clamp(max=num_tokens - 1)].float()
    if mode == "lasttoken":
        return hidden[(cu_seqlens[1:] - 1).clamp(min=0)].float()
    raise ValueError(f"unknown pooling mode {mode!r}")


class Pooler(nn.Module):
    """Pools, truncates, normalises and quantises: hidden [num_tokens, hidden] -> [num_seqs_padded, spec.width]."""

    def __init__(self, spec: OutputSpec):
        super().__init__()
        self.spec = spec
        # bit weights for packing, first dimension in the most significant bit (as numpy.packbits)
        self.register_buffer("bit_weights", torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8),
                             persistent=False)

    def forward(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor, seq_ids: torch.Tensor) -> torch.Tensor:
        x = pool(hidden, cu_seqlens, seq_ids, self.spec.pooling)[:, : self.spec.dim]
        if self.spec.normalize:
            x = F.normalize(x, dim=-1)
        if self.spec.dtype == "int8":
            return torch.round(torch.tanh(x) * 127).to(torch.int8)  # round half to even
        if self.spec.dtype == "binary":
            bits = (x >= 0).view(x.shape[0], -1, 8).to(torch.uint8)
            return (bits * self.bit_weights).sum(-1, dtype=torch.uint8)
        return x.to(self.spec.torch_dtype)
