"""Stand-ins for a CUDA engine's failures, around a real (CPU) engine."""
from __future__ import annotations

import torch

from embedpipe.kernels.engine import Engine


class OutOfMemoryAbove:
    """An engine that runs out of memory on batches of more than max_tokens padded tokens, when the
    batch is launched (at="step") or when its result is read (at="result"), as CUDA can."""

    def __init__(self, engine: Engine, max_tokens: int, at: str = "step"):
        self.engine, self.max_tokens, self.at = engine, max_tokens, at
        self.num_failed = 0

    def step(self, batch):
        if batch.key[0] <= self.max_tokens:
            return self.engine.step(batch)
        self.num_failed += 1
        if self.at == "step":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return FailingHandle()

    def __getattr__(self, name):  # output, folder, counters, device: the real engine's
        return getattr(self.engine, name)


class FailingHandle:
    """A LazyTensor whose batch ran out of memory: the error surfaces when its rows are waited for."""

    def done(self):
        return True

    def result(self):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (surfaced at synchronize)")

    def read(self, consume):
        self.result()
