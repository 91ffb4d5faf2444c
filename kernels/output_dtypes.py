"""The one table of output dtypes: how an embedding is stored, and the numpy quantiser.

The engine quantises on the device (pooling.Pooler, inside the graph); everything else (the
unit files' Arrow types, verify's checks, the index's metric, the server's queries against an
int8 or binary index, the CLI's --dtype choices) reads this table. numpy only: `merge` and
`verify` use it without loading torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OutputDtype:
    name: str
    numpy: type  # one stored component; torch's dtype of the same name on the device
    packed_bits: bool = False  # binary: the sign of each dimension, 8 dimensions a byte (first in the top bit)
    # the FAISS index a job builds unless --index-factory says otherwise: int8's vectors are 1 byte a
    # dimension on disk, and SQ8 keeps them so in memory (Flat would hold 4); binary's Flat is FAISS's BFlat
    default_index_factory: str = "Flat"

    @property
    def is_float(self) -> bool:
        return np.issubdtype(self.numpy, np.floating)

    def width(self, dim: int) -> int:
        """Stored components per row of `dim` dimensions."""
        return dim // 8 if self.packed_bits else dim

    def quantise(self, vectors: np.ndarray) -> np.ndarray:
        """float32 [n, dim] (pooled, truncated, normalised) -> [n, width(dim)] as the Pooler stores them."""
        if self.name == "int8":
            return np.round(np.tanh(vectors) * 127).astype(np.int8)  # round half to even, as torch.round
        if self.packed_bits:
            return np.packbits(vectors >= 0, axis=1)
        return vectors.astype(self.numpy)


OUTPUT_DTYPES: dict[str, OutputDtype] = {d.name: d for d in (
    OutputDtype("float32", np.float32),
    OutputDtype("float16", np.float16),
    OutputDtype("int8", np.int8, default_index_factory="SQ8"),  # round(tanh(x) * 127)
    OutputDtype("binary", np.uint8, packed_bits=True),
)}


def output_dtype(name: str) -> OutputDtype:
    """Raises ValueError naming the choices for an unknown name."""
    if name not in OUTPUT_DTYPES:
        raise ValueError(f"output dtype must be one of {', '.join(OUTPUT_DTYPES)}, not {name!r}")
    return OUTPUT_DTYPES[name]
