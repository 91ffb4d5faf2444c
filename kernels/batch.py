"""Packed (ragged) batches and the bucket policy that pads them to graph keys."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from typing import Sequence

import numpy as np
import torch


@dataclass(frozen=True)
class BucketPolicy:
    """Pads a batch's token and sequence counts to a small set of sizes.

    The pair (padded tokens, padded sequences) starts the CUDA-graph key. Token counts go up to a
    multiple of `small_token_step` while the batch holds at most `large_token_threshold` tokens,
    and to a multiple of `large_token_step` above it. Sequence counts (real sequences plus one
    padding sequence that owns the padding tokens) go up to the next entry of `seq_buckets`.
    """

    small_token_step: int = 64
    large_token_step: int = 256
    large_token_threshold: int = 2048
    seq_buckets: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

    def __post_init__(self):
        if self.small_token_step <= 0 or self.large_token_step % self.small_token_step:
            raise ValueError("large_token_step must be a positive multiple of small_token_step")
        if self.large_token_threshold % self.large_token_step:
            raise ValueError("large_token_threshold must be a multiple of large_token_step")
        if list(self.seq_buckets) != sorted(set(self.seq_buckets)) or self.seq_buckets[0] < 2:
            raise ValueError("seq_buckets must be increasing and start at 2 or more")

    def pad_tokens(self, num_tokens: int) -> int:
        step = self.small_token_step if num_tokens <= self.large_token_threshold else self.large_token_step
        return max(step, -(-num_tokens // step) * step)

    def pad_seqs(self, num_seqs: int) -> int:
        """Sequence slots for `num_seqs` real sequences plus the padding sequence."""
        needed = num_seqs + 1
        i = bisect.bisect_left(self.seq_buckets, needed)
        return self.seq_buckets[i] if i < len(self.seq_buckets) else needed

    @property
    def max_seqs(self) -> int:
        """The most real sequences a bucketed batch can hold."""
        return self.seq_buckets[-1] - 1


@dataclass
class Batch:
    """A packed batch: sequences laid end to end, padded to a bucket.

    input_ids:  [num_tokens_padded] int64; tokens of sequence i are
                input_ids[cu_seqlens[i]:cu_seqlens[i+1]].
    cu_seqlens: [num_seqs_padded + 1] int32. Slot num_seqs is the padding sequence: it owns
                every padding token; later slots are empty.
    num_seqs:   real sequences (the first num_seqs slots).
    span_bounds: None, or [num_spans, 2] int32: a second level of offsets (late chunking). Row j is
                [start, end) in input_ids, non-empty and inside one real sequence; a sequence's spans
                follow those of the sequences before it, may overlap and need not cover it. With spans,
                a step returns a row per span, in this order, instead of a row per sequence.
    token_type_ids: None (type 0 everywhere: every embedding batch), or [num_tokens_padded] int64, each token's
                segment, as input_ids (a cross-encoder's pairs `[CLS] q [SEP] d [SEP]`: 0 for `[CLS] q [SEP]`, 1
                after); padding tokens are 0.
    """

    input_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    num_seqs: int
    num_tokens: int  # real tokens
    tags: list = field(default_factory=list)  # caller's per-sequence bookkeeping, untouched here
    span_bounds: torch.Tensor | None = None
    token_type_ids: torch.Tensor | None = None

    @classmethod
    def of_arrays(cls, ids: np.ndarray, cu: np.ndarray, num_seqs: int, num_tokens: int, tags: list,
                  span_bounds: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None,
                  longest: int | None = None) -> "Batch":
        """A batch over the packer's numpy arrays (ids int64, cu int32), its properties below known at once."""
        batch = cls(torch.from_numpy(ids), torch.from_numpy(cu), num_seqs, num_tokens, tags, span_bounds,
                    token_type_ids)
        batch.__dict__.update(arrays=(ids, cu), key=(len(ids), len(cu) - 1))  # the cached properties' values
        if longest is not None:
            batch.__dict__["longest"] = longest
        return batch

    # The properties a CUDA step reads, computed once a batch (or given by of_arrays): a batch-1 step's host part is
    # ~20 us, and each tensor.numpy() or shape read costs ~1-2 us of it (H200 host, 2026-12-06). A batch is not
    # changed once packed.
    @cached_property
    def key(self) -> tuple[int, int]:
        return int(self.input_ids.shape[0]), int(self.cu_seqlens.shape[0] - 1)

    @cached_property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, cu_seqlens) as numpy arrays over the tensors' memory."""
        return self.input_ids.numpy(), self.cu_seqlens.numpy()

    @cached_property
    def longest(self) -> int:
        """The longest sequence, the padding sequence included."""
        return longest_sequence(self.arrays[1])

    @property
    def num_padding_tokens(self) -> int:
        return int(self.input_ids.shape[0]) - self.num_tokens

    @property
    def num_spans(self) -> int:
        return 0 if self.span_bounds is None else int(self.span_bounds.shape[0])

    @property
    def num_rows(self) -> int:
        """Rows a step returns: one per span with spans, else one per sequence."""
        return self.num_seqs if self.span_bounds is None else self.num_spans

    def relative_spans(self) -> list[list[tuple[int, int]]] | None:
        """Per sequence, its spans as (start, end) within the sequence (pack's `spans`); None without spans."""
        if self.span_bounds is None:
            return None
        bounds, cu = self.span_bounds.numpy(), self.cu_seqlens[: self.num_seqs + 1].numpy()
        owners = np.searchsorted(cu[1:], bounds[:, 0], side="right")  # each span's sequence
        relative = [[] for _ in range(self.num_seqs)]
        for owner, (start, end) in zip(owners.tolist(), (bounds - cu[owners, None]).tolist()):
            relative[owner].append((start, end))
        return relative


def longest_sequence(cu_seqlens: np.ndarray) -> int:
    """The longest sequence of offsets [num_seqs + 1]: a few sequences in a Python loop (numpy's calls cost more
    than the work), many in numpy."""
    if len(cu_seqlens) <= 64:
        bounds = cu_seqlens.tolist()
        return max(end - start for start, end in zip(bounds, bounds[1:]))
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max())


def pack(sequences: Sequence[Sequence[int]], policy: BucketPolicy | None = None, pad_token_id: int = 0,
         tags: list | None = None, spans: Sequence[Sequence[tuple[int, int]]] | None = None,
         token_types: Sequence[Sequence[int]] | None = None) -> Batch:
    """Lay token-id sequences end to end; with a policy, pad to its buckets.

    spans (late chunking): per sequence, at least one (start, end) within it, 0 <= start < end <= its
    length; they become the batch's span_bounds, absolute and in this order. token_types: per sequence, a
    type per token; they become the batch's token_type_ids, laid out as the ids. Raises ValueError otherwise.
    """
    if not sequences:
        raise ValueError("cannot pack an empty batch")
    # Python's len/sum/max on the lengths, not numpy's: a query's batch of one is packed in ~8 us, where numpy's
    # per-call cost made it ~20 (TokenBudgetBatcher packs every batch of the server and of the Python API's encode)
    lengths = [len(s) for s in sequences]
    if min(lengths) == 0:
        raise ValueError("cannot pack an empty sequence")
    num_tokens, num_seqs = sum(lengths), len(sequences)
    longest = max(lengths)
    if policy is None:
        padded_tokens, padded_seqs = num_tokens, num_seqs
    else:
        padded_tokens, padded_seqs = policy.pad_tokens(num_tokens), policy.pad_seqs(num_seqs)
    ids = np.empty(padded_tokens, dtype=np.int64)
    ids[:num_tokens] = (sequences[0] if num_seqs == 1
                        else np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences]))
    ids[num_tokens:] = pad_token_id
    cu = np.empty(padded_seqs + 1, dtype=np.int32)
    cu[0] = 0
    cu[1:num_seqs + 1] = list(accumulate(lengths))
    cu[num_seqs + 1:] = padded_tokens
    if spans is not None or token_types is not None:
        lengths = np.asarray(lengths, dtype=np.int64)
    span_bounds = None if spans is None else _absolute_spans(spans, lengths, cu[:num_seqs])
    types = None if token_types is None else _packed_types(token_types, lengths, padded_tokens)
    longest = max(longest, padded_tokens - num_tokens)  # the padding sequence's too
    return Batch.of_arrays(ids, cu, num_seqs, num_tokens, [] if tags is None else tags, span_bounds, types, longest)


def _packed_types(token_types: Sequence[Sequence[int]], lengths: np.ndarray, padded_tokens: int) -> torch.Tensor:
    """Per-sequence token types -> [padded_tokens] int64, laid out as pack lays the ids (padding: type 0)."""
    type_lengths = np.fromiter((len(t) for t in token_types), dtype=np.int64, count=len(token_types))
    if len(type_lengths) != len(lengths) or (type_lengths != lengths).any():
        raise ValueError("token_types: one type per token of each sequence")
    types = np.zeros(padded_tokens, dtype=np.int64)
    types[: int(lengths.sum())] = np.concatenate([np.asarray(t, dtype=np.int64) for t in token_types])
    return torch.from_numpy(types)


def _absolute_spans(spans: Sequence[Sequence[tuple[int, int]]], lengths: np.ndarray, starts: np.ndarray
                    ) -> torch.Tensor:
    """Per-sequence (start, end) pairs -> [num_spans, 2] int32 offsets into the packed ids (starts: each
    sequence's first token). A sequence without spans would run for nothing, so each needs one."""
    if len(spans) != len(lengths):
        raise ValueError(f"spans: one list per sequence, {len(lengths)}, not {len(spans)}")
    counts = np.fromiter((len(s) for s in spans), dtype=np.int64, count=len(spans))
    if (counts == 0).any():
        raise ValueError(f"spans: sequence {int(np.argmin(counts))} has none")
    pairs = np.array([pair for sequence in spans for pair in sequence], dtype=np.int64).reshape(-1, 2)
    owners = np.repeat(np.arange(len(spans)), counts)
    bad = (pairs[:, 0] < 0) | (pairs[:, 1] <= pairs[:, 0]) | (pairs[:, 1] > lengths[owners])
    if bad.any():
        j = int(np.argmax(bad))
        raise ValueError(f"spans: {tuple(pairs[j].tolist())} of sequence {owners[j]} (length {lengths[owners[j]]}) "
                         "is not 0 <= start < end <= length")
    return torch.from_numpy((pairs + starts[owners, None]).astype(np.int32))


def split_in_halves(batch: Batch, policy: BucketPolicy | None = None, pad_token_id: int = 0) -> tuple[Batch, Batch]:
    """The batch's first and second half of sequences (num_seqs >= 2), each packed anew with its tags, spans
    and token types: the halves' rows, one after the other, are the batch's."""
    if batch.num_seqs < 2:
        raise ValueError("a batch of one sequence cannot be split")
    bounds = list(zip(batch.cu_seqlens[: batch.num_seqs].tolist(), batch.cu_seqlens[1: batch.num_seqs + 1].tolist()))
    sequences = [batch.input_ids[start:end] for start, end in bounds]
    types = None if batch.token_type_ids is None else [batch.token_type_ids[start:end] for start, end in bounds]
    half = batch.num_seqs // 2
    spans = batch.relative_spans()

    def halves(per_sequence):
        return (None, None) if per_sequence is None else (per_sequence[:half], per_sequence[half:])

    (first_spans, second_spans), (first_types, second_types) = halves(spans), halves(types)
    return (pack(sequences[:half], policy, pad_token_id, batch.tags[:half], first_spans, first_types),
            pack(sequences[half:], policy, pad_token_id, batch.tags[half:], second_spans, second_types))
