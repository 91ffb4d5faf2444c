"""An engine fed unit by unit: UnitStream keeps one UnitRunner streaming across the units handed to it.

A caller that gets its units one at a time (the Ray engine actor, scale/ray_stages.py) submits each
unit's chunks and gets a future of what the engine did for that unit (an EngineReport), set once the
unit's file is committed, or once the unit is skipped as a bad file. The reports add up to the engine's
totals; a report's units, rows and bad files are its unit's own, its tokens and batches those counted
since the report before (a batch that spans two units counts for the first to end). The runner runs in
a thread of its own over the chunks of the submitted units, in order: batches span units as in a local
run, so the engine runs the next unit's batches while the last one is written. When no unit is waiting, the source
yields IDLE (unit_files.py) and the runner finishes the rows it holds: a unit never waits for the next.

A failure (the input error that stops a job, a device error, a failed write) ends the stream: the units
open then and every one submitted later fail with it; the units committed before it stay done.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from typing import Iterable, Iterator

from embedpipe.kernels.engine import Engine

from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.index.reader import Chunk
from embedpipe.pipeline.index.report import EngineReport
from embedpipe.pipeline.index.runner import UnitRunner
from embedpipe.pipeline.index.unit_files import IDLE, Idle, UnitSlot
from embedpipe.pipeline.inputs.sources import InputError
from embedpipe.pipeline.util.progress import Progress

_CLOSED = None  # in the queue: no more units
IDLE_CHECK_S = 0.2  # how often an idle stream looks for a failed write


class UnitStream:
    """One engine's runner across the units submitted to it; see the module docstring."""

    def __init__(self, job: JobConfig, engine: Engine, label: str):
        self.label = label  # the reports' device
        self._units: SimpleQueue[Iterable[Chunk] | None] = SimpleQueue()
        self._waiting: dict[str, Future] = {}  # submitted units whose report is not out yet
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._runner = _StreamRunner(job, engine, self)
        self._last = EngineReport(label)  # the running totals at the last unit's report
        self._thread = threading.Thread(target=self._run, name="embedpipe-unit-stream", daemon=True)
        self._thread.start()

    def submit(self, unit_id: str, chunks: Iterable[Chunk]) -> Future:
        """Queues one unit's chunks (all of them, in order); the future's result is its EngineReport."""
        future: Future = Future()
        future.set_running_or_notify_cancel()  # it cannot be cancelled: the unit runs once queued
        with self._lock:
            if self._error is not None:
                future.set_exception(self._error)
                return future
            self._waiting[unit_id] = future
        self._units.put(chunks)
        return future

    def close(self) -> None:
        """Lets the runner finish what was submitted and end; raises the error that ended it, if one did."""
        self._units.put(_CLOSED)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            self._runner.run(self._chunks())
        except BaseException as error:  # InputError, a device error, a failed write: the waiting units get it
            with self._lock:
                self._error = error
                waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                future.set_exception(error)

    def _chunks(self) -> Iterator[Chunk | Idle]:
        while True:
            if self._units.empty():
                yield IDLE  # the runner finishes the rows it holds, then waits here for the next unit
            chunks = self._next_unit()
            if chunks is _CLOSED:
                return
            yield from chunks

    def _next_unit(self) -> Iterable[Chunk] | None:
        """The next unit's chunks; while none comes, raises a failed write or commit of the units before (the
        writer thread's error), so their futures fail instead of waiting for a unit that may never come."""
        while True:
            try:
                return self._units.get(timeout=IDLE_CHECK_S)
            except Empty:
                self._runner.writer.check()

    def unit_ended(self, unit_id: str) -> None:
        """In the runner's writer thread, after the unit's commit (or its skip): its share of the totals."""
        totals = self._runner.report()
        totals.device = self.label
        totals.main_thread_cpu_s = thread_cpu_s(self._thread)
        totals.writer_thread_cpu_s = time.thread_time()  # this thread is the writer thread
        report, self._last = totals.since(self._last), totals
        with self._lock:
            future = self._waiting.pop(unit_id, None)
        if future is not None:
            future.set_result(report)


class _StreamRunner(UnitRunner):
    """A UnitRunner that tells its stream when each unit has ended."""

    def __init__(self, job: JobConfig, engine: Engine, stream: UnitStream):
        super().__init__(job, engine, Progress(None, quiet=True))
        self.stream = stream

    def _commit(self, slot: UnitSlot) -> None:  # in the writer thread
        super()._commit(slot)
        self.stream.unit_ended(slot.unit.unit_id)

    def _end_unit(self, slot: UnitSlot, error: InputError | None) -> None:
        super()._end_unit(slot, error)  # raises an error that stops the job
        if error is not None:  # a bad file skipped: reported after the writes queued before it
            self.writer.submit(self.stream.unit_ended, slot.unit.unit_id)


def thread_cpu_s(thread: threading.Thread) -> float:
    """CPU seconds `thread` has run (0.0 where the platform cannot tell)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return 0.0
