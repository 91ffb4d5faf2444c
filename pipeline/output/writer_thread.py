"""One background thread for a job's file writes and commits, run in the order they were submitted.

Parquet encoding, the writes and fsync release the GIL, so the main thread keeps the engine fed
while a unit file is written and committed. The first error stops the thread's work: it is raised
in the caller's thread by the next submit(), by wait() or by close(). When the caller fails, close()
without raising still runs what is queued, so a unit that had ended before the failure is committed
(the caller then aborts the files that were not).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

MAX_QUEUED = 64  # writes waiting: a submit past this waits (the writes bound the job's memory)


class WriterThread:
    def __init__(self, max_queued: int = MAX_QUEUED):
        self._queue: queue.Queue = queue.Queue(max_queued)
        self._error: BaseException | None = None
        self.cpu_s = 0.0  # the thread's CPU time, once closed
        self._thread = threading.Thread(target=self._run, name="embedpipe-writer", daemon=True)
        self._thread.start()

    def submit(self, work: Callable, *args) -> None:
        """Queues work(*args); raises the error of earlier work, if any."""
        self.check()
        self._queue.put((work, args))

    def wait(self) -> None:
        """Returns once everything submitted has run; raises the first error."""
        done = threading.Event()
        self._queue.put((done.set, ()))
        while not done.wait(0.1) and self._error is None:  # after an error, no more work runs
            pass
        self.check()

    def close(self, raise_error: bool = True) -> None:
        """Runs what is queued, ends the thread and (unless told not to) raises the first error."""
        self._queue.put(None)
        self._thread.join()
        if raise_error:
            self.check()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            work, args = item
            if self._error is None:
                try:
                    work(*args)
                except BaseException as error:  # raised in the caller's thread
                    self._error = error
        self.cpu_s = time.thread_time()

    def check(self) -> None:
        """Raises the first error of the work run so far, if any."""
        if self._error is not None:
            raise self._error
