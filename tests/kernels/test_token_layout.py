"""positions and slot ids from cu_seqlens (ops.token_layout), against a per-sequence reference."""
import numpy as np
import pytest
import torch

from embedpipe.kernels.ops import TorchOps


def _reference(lengths: list[int]) -> tuple[list[int], list[int]]:
    positions = [p for n in lengths for p in range(n)]
    slots = [slot for slot, n in enumerate(lengths) for _ in range(n)]
    return positions, slots


@pytest.mark.parametrize("seed", range(20))
def test_token_layout_matches_a_per_sequence_reference(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, size=rng.integers(1, 30)).tolist()
    lengths[0] = max(lengths[0], 1)
    lengths += [0] * int(rng.integers(0, 4))  # empty slots after the padding sequence
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    positions, slots = TorchOps.token_layout(cu, int(cu[-1]))
    assert positions.dtype == slots.dtype == torch.int32
    assert (positions.tolist(), slots.tolist()) == _reference(lengths)
