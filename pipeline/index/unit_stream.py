"""An engine fed unit by unit: UnitStream keeps one UnitRunner streaming across the units handed to it.

A caller that gets its units one at a time (the Ray engine actor, scale/ray_stages.py) submits each
unit's chunks and gets a future of what the engine did for that unit (an EngineReport), set once the
unit's file is committed, or once the unit is skipped as a bad file. The runner runs in a thread of its
own over the chunks of the submitted units, in order: batches span units as in a local run, so the
engine runs the next unit's batches while the last one is written. When no unit is waiting, the source
yields IDLE (unit_files.py) and the runner finishes the rows it holds: a unit never waits for the next.

A failure (the input error that stops a job, a device error) ends the stream: the units open then and
every one submitted later fail with it; the units committed before it stay done.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from queue import SimpleQueue
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
        except BaseException as error:  # InputError, a device error: the units still waiting get it
            with self._lock:
                self._error = error
                waiting, self._waiting = self._waiting, {}
            for future in waiting.values():
                future.set_exception(error)

    def _chunks(self) -> Iterator[Chunk | Idle]:
        while True:
            if self._units.empty():
                yield IDLE  # the runner finishes the rows it holds, then waits here for the next unit
            chunks = self._units.get()
            if chunks is _CLOSED:
                return
            yield from chunks

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
