"""A batch the device has no memory for runs as two halves, one after the other, down to single texts.

A CUDA out-of-memory error surfaces when the batch is launched (an allocation fails) or when its
result is read; both end in the same split. The halves are packed anew, so they also pad less.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from embedpipe.kernels.batch import Batch, BucketPolicy, split_in_halves
from embedpipe.kernels.lazy_tensor import LazyTensor

from embedpipe.pipeline.errors import JobFault


class TextTooLargeForDevice(JobFault, RuntimeError):
    """A single text does not fit in the device's free memory."""


class SplitOnOutOfMemory:
    """`step` / `result` / `read` as Engine.step and LazyTensor.result / read, splitting a batch that runs out of
    memory.

    describe(tag) names a sequence for the error raised when one alone does not fit.
    """

    def __init__(self, engine, policy: BucketPolicy, pad_token_id: int = 0, describe: Callable[[Any], str] = repr):
        self.engine, self.policy, self.pad_token_id, self.describe = engine, policy, pad_token_id, describe
        self.num_splits = 0

    def step(self, batch: Batch) -> LazyTensor:
        try:
            return self.engine.step(batch)
        except torch.cuda.OutOfMemoryError as error:
            return LazyTensor(torch.cat([self.result(half, self.step(half)) for half in self._halves(batch, error)]))

    def result(self, batch: Batch, handle: LazyTensor) -> torch.Tensor:
        """The batch's embeddings [num_seqs, width]."""
        parts = []
        self.read(batch, handle, lambda _, rows: parts.append(rows.clone()))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def read(self, batch: Batch, handle: LazyTensor, consume: Callable[[Batch, torch.Tensor], Any]) -> None:
        """consume(batch, its embeddings [num_seqs, width]) as LazyTensor.read hands them over; a batch
        that runs out of memory is consumed as its halves, in order, each with its own rows."""
        try:
            handle.read(lambda rows: consume(batch, rows))
        except torch.cuda.OutOfMemoryError as error:
            for half in self._halves(batch, error):
                self.read(half, self.step(half), consume)

    def _halves(self, batch: Batch, error: torch.cuda.OutOfMemoryError) -> tuple[Batch, Batch]:
        if batch.num_seqs == 1:
            reason = str(error).splitlines()[0] if str(error) else "out of memory"
            raise TextTooLargeForDevice(
                f"the device ran out of memory on a single text of {batch.num_tokens} tokens "
                f"({self.describe(batch.tags[0])}), in a batch of its own ({reason}); is another process "
                "using the device?") from error
        torch.cuda.empty_cache()  # give the failed batch's cached blocks back before the halves run
        self.num_splits += 1
        return split_in_halves(batch, self.policy, self.pad_token_id)
