"""pack's layout against a plain reference: ids end to end then padding, offsets with the padding sequence owning
the padding tokens and later slots empty, for one sequence and many, lists, numpy arrays and tensors."""
import numpy as np
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack


def reference(sequences, policy, pad):
    lengths = [len(s) for s in sequences]
    tokens = sum(lengths)
    padded_tokens = tokens if policy is None else policy.pad_tokens(tokens)
    padded_seqs = len(sequences) if policy is None else policy.pad_seqs(len(sequences))
    ids = [int(t) for s in sequences for t in s] + [pad] * (padded_tokens - tokens)
    cu = [0] + np.cumsum(lengths).tolist() + [padded_tokens] * (padded_seqs - len(sequences))
    return ids, cu, max(lengths + [padded_tokens - tokens])


@pytest.mark.parametrize("policy", [BucketPolicy(), None])
@pytest.mark.parametrize("kind", [list, np.array, torch.tensor])
@pytest.mark.parametrize("lengths", [[1], [128], [64], [3, 500, 2], [7] * 70])
def test_pack_lays_out_as_the_reference(policy, kind, lengths):
    rng = np.random.default_rng(len(lengths))
    sequences = [kind(rng.integers(0, 250_000, n).tolist()) for n in lengths]
    batch = pack(sequences, policy, pad_token_id=3)
    ids, cu, longest = reference(sequences, policy, 3)
    assert batch.input_ids.dtype == torch.int64 and batch.cu_seqlens.dtype == torch.int32
    assert batch.input_ids.tolist() == ids and batch.cu_seqlens.tolist() == cu
    assert (batch.num_seqs, batch.num_tokens, batch.longest) == (len(lengths), sum(lengths), longest)
    assert type(batch.longest) is int and type(batch.num_tokens) is int


@pytest.mark.parametrize("sequences, message", [([], "empty batch"), ([[1, 2], []], "empty sequence")])
def test_pack_refuses_empty_input(sequences, message):
    with pytest.raises(ValueError, match=message):
        pack(sequences, BucketPolicy())
