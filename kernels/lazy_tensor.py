"""LazyTensor: the handle `Engine.step()` returns before the device has finished the batch."""
from __future__ import annotations

from typing import Callable, TypeVar

import torch

T = TypeVar("T")


class LazyTensor:
    """Pooled embeddings of one batch, [batch.num_rows, width] (a row per sequence, or per span), on the host
    once `result()` returns.

    On the CPU the tensor is complete when the handle is made. On CUDA, `host` is a slice of a
    pinned buffer that a non-blocking copy fills, and `event` is recorded after that copy:
    `result()` waits on that event only, and returns a tensor the caller owns. `read(consume)`
    hands the rows over in the pinned buffer itself, saving that copy (the index job scatters them
    straight into its per-chunk arrays); the buffer is reused by a later batch, so after `read`
    the handle is spent.
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
            if self._host is None:
                raise RuntimeError("this batch's rows were handed over by read(); result() has none left")
            self._event.synchronize()
            self._result = self._host.clone()  # the pinned buffer is reused by a later batch
            self._host = self._keepalive = None
        return self._result

    def read(self, consume: Callable[[torch.Tensor], T]) -> T:
        """consume(rows [num_rows, width]) once the device has written them; consume copies what it keeps."""
        if self._result is not None:
            return consume(self._result)
        if self._host is None:
            raise RuntimeError("this batch's rows were handed over by read() already")
        self._event.synchronize()
        try:
            return consume(self._host)
        finally:
            self._host = self._keepalive = None

    def release(self) -> None:
        """Before its pinned buffer is reused: copies the rows out, unless result() or read() took them."""
        if self._result is None and self._host is not None:
            self.result()
