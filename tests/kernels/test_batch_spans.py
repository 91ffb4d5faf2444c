"""A Batch's spans (late chunking), device-free: pack makes them absolute, relative_spans undoes it, the OOM
split carries them with their sequences, and pack refuses spans that are empty or leave their sequence."""
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack, split_in_halves

SEQUENCES = [[5] * 10, [6] * 3, [7] * 40, [8] * 1]
SPANS = [[(0, 4), (2, 10)], [(1, 2)], [(0, 40), (0, 16), (8, 24), (39, 40)], [(0, 1)]]  # overlapping, one token


def test_pack_makes_spans_absolute_in_order():
    batch = pack(SEQUENCES, BucketPolicy(), tags=list("abcd"), spans=SPANS)
    assert batch.span_bounds.dtype == torch.int32 and batch.span_bounds.shape == (8, 2)
    assert batch.span_bounds.tolist() == [[0, 4], [2, 10], [11, 12], [13, 53], [13, 29], [21, 37], [52, 53],
                                          [53, 54]]
    assert (batch.num_spans, batch.num_rows, batch.num_seqs) == (8, 8, 4)
    assert batch.relative_spans() == SPANS
    assert batch.key == pack(SEQUENCES, BucketPolicy()).key  # spans change no graph key or padding


def test_without_spans_a_batch_has_a_row_per_sequence():
    batch = pack(SEQUENCES, BucketPolicy())
    assert batch.span_bounds is None and batch.relative_spans() is None
    assert (batch.num_spans, batch.num_rows) == (0, 4)
    first, second = split_in_halves(batch, BucketPolicy())
    assert first.span_bounds is None and second.span_bounds is None


def test_split_in_halves_carries_each_sequences_spans():
    batch = pack(SEQUENCES, BucketPolicy(), tags=list("abcd"), spans=SPANS)
    first, second = split_in_halves(batch, BucketPolicy())
    assert (first.tags, second.tags) == (list("ab"), list("cd"))
    assert (first.relative_spans(), second.relative_spans()) == (SPANS[:2], SPANS[2:])
    assert second.span_bounds.tolist() == [[0, 40], [0, 16], [8, 24], [39, 40], [40, 41]]
    assert first.num_rows + second.num_rows == batch.num_rows


@pytest.mark.parametrize("spans,message", [
    ([[(0, 4)], [(1, 2)], [(0, 40)]], "one list per sequence, 4, not 3"),
    ([[(0, 4)], [], [(0, 40)], [(0, 1)]], "sequence 1 has none"),
    ([[(0, 4)], [(2, 2)], [(0, 40)], [(0, 1)]], r"\(2, 2\) of sequence 1 \(length 3\)"),  # empty
    ([[(0, 11)], [(1, 2)], [(0, 40)], [(0, 1)]], r"\(0, 11\) of sequence 0 \(length 10\)"),  # past its end
    ([[(0, 4)], [(1, 2)], [(-1, 3)], [(0, 1)]], r"\(-1, 3\) of sequence 2"),
])
def test_pack_refuses_spans_outside_their_sequence(spans, message):
    with pytest.raises(ValueError, match=message):
        pack(SEQUENCES, BucketPolicy(), spans=spans)
