"""LazyTensor: the handle `Engine.step()` returns before the device has finished the batch."""
from __future__ import annotations

import torch


class LazyTensor:
    """Pooled embeddings of one batch, [num_seqs, width], on the host once `result()` returns.

    On the CPU the tensor is complete when the handle is made. On CUDA, `host` is a slice of a
    pinned buffer that a non-blocking copy fills, and `event` is recorded after that copy:
    `result()` waits on that event only, and returns a tensor the caller owns.
    """

    def __init__(self, host: torch.Tensor, event: "torch.cuda.Event | None" = None, keepalive=None):
        self._host = host
        self._event = event
        self._keepalive = keepalive  # device tensors the copy reads, held until it completes
        self._result: torch.Tensor | None = None if event is not None else host

    def done(self) -> bool:
        return self._result is not None or self._event.query()

    def result(self) -> torch.Tensor:
        if self._result is None:
            self._event.synchronize()
            self._result = self._host.clone()  # the pinned buffer is reused by a later batch
            self._host = self._keepalive = None
        return self._result
