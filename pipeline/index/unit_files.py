"""Writing a job's units: each unit's rows into a file of its own, committed once the unit has ended.

UnitFilesRunner takes the chunks of the units in order (reader.Chunk: a piece's rows, tokenized,
or a piece's end marker) and keeps, per open unit, its file writer and its rejected-rows writer.
Subclasses say what a unit's file holds: the index job's runner (runner.py) embeds the rows first,
the tokenize job (tokenize_job.py) writes their token ids. Writes and commits run in a background
thread (WriterThread), in order; a unit counts as done once its file is renamed into place and its
manifest record written. A failure aborts every open unit's files; done units stay done.
A source that is fed as it goes (unit_stream.py) yields IDLE when it has no chunk for now: the rows
held are finished then, so the units they complete are committed while the source waits.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa

from embedpipe.pipeline.inputs.column_types import ColumnTypes
from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.output.manifest import completed_columns, mark_done
from embedpipe.pipeline.output.layout import EMBEDDINGS_FOLDER
from embedpipe.pipeline.output.writer_thread import WriterThread
from embedpipe.pipeline.util.progress import Progress
from embedpipe.pipeline.index.reader import Chunk, is_unreadable_file
from embedpipe.pipeline.output.sinks import AtomicParquetWriter, RejectedWriter
from embedpipe.pipeline.inputs.sources import InputError, WorkUnit


class Idle:
    """What a chunk source yields when it has no chunk for now (see the module docstring)."""

    def __repr__(self) -> str:
        return "IDLE"


IDLE = Idle()


@dataclass
class UnitSlot:
    """A unit being written: its two writers and how many of its chunks still wait for their rows' results."""

    unit: WorkUnit
    rejected: RejectedWriter
    writer: AtomicParquetWriter | None = None  # has num_rows, close() -> Path and abort()
    num_open_chunks: int = 0
    ended: bool = False  # its last piece's end marker has come
    committed: bool = False  # its file and record are in place (set by the writer thread)

    def abort(self) -> None:
        self.rejected.abort()
        if self.writer is not None:
            self.writer.abort()


@dataclass
class RunCounts:
    units: int = 0
    rows: int = 0  # output rows: with --chunk-tokens, windows
    input_rows: int = 0  # the input rows they are of (without --chunk-tokens, rows)
    tokens: int = 0
    rejected: int = 0
    truncated: int = 0
    bad_files: list[dict] = field(default_factory=list)
    main_thread_cpu_s: float = 0.0  # CPU time of the thread that ran the units, and of its writer thread
    writer_thread_cpu_s: float = 0.0
    # wall time that thread spent getting chunks (waiting on the workers, receiving): the engine idles
    # once its queued batches are done; first_chunk_s, the wait for the first one
    chunk_wait_s: float = 0.0
    first_chunk_s: float = 0.0


class UnitFilesRunner:
    """Streams the chunks of units into one file per unit, in OUTPUT/<folder>; see the module docstring."""

    folder = EMBEDDINGS_FOLDER

    def __init__(self, job: JobConfig, progress: Progress):
        self.job, self.progress = job, progress
        self.column_types = ColumnTypes(completed_columns(job.output, self.folder))
        self.slots: dict[str, UnitSlot] = {}  # open units
        self.committing: deque[UnitSlot] = deque()  # ended units whose commit may still be queued
        self.skipped: set[str] = set()  # units given up on (a bad file): their later chunks are dropped
        self.counts = RunCounts()

    def run(self, chunks: Iterable[Chunk | Idle]) -> RunCounts:
        """Writes the units of `chunks` (read_and_tokenize's, or the same made elsewhere)."""
        self.writer = WriterThread()
        started = time.thread_time()
        try:
            for chunk in self._timed(chunks):
                if chunk is IDLE:
                    self._finish()
                else:
                    self._accept(chunk)
            self._finish()
            self.writer.close()
            self.counts.main_thread_cpu_s += time.thread_time() - started
            self.counts.writer_thread_cpu_s += self.writer.cpu_s
        except BaseException:
            self.writer.close(raise_error=False)  # units that ended before the failure are committed
            for slot in [*self.slots.values(), *self.committing]:  # no partial file survives; done units stay
                if not slot.committed:
                    slot.abort()
            raise
        return self.counts

    def _timed(self, chunks: Iterable[Chunk | Idle]) -> Iterator[Chunk | Idle]:
        """`chunks`, adding the time spent getting each to counts.chunk_wait_s."""
        chunks, counts = iter(chunks), self.counts
        try:
            while True:
                asked = time.perf_counter()
                chunk = next(chunks, None)
                waited = time.perf_counter() - asked
                if chunk is not IDLE:
                    counts.first_chunk_s = counts.first_chunk_s or waited
                counts.chunk_wait_s += waited
                if chunk is None:
                    return
                yield chunk
        finally:  # a run stopped early closes the source now (a pool's map then stops its workers)
            if hasattr(chunks, "close"):
                chunks.close()

    # what a subclass provides
    def _open_file(self, unit: WorkUnit, schema: pa.Schema) -> AtomicParquetWriter:
        raise NotImplementedError

    def _take_rows(self, slot: UnitSlot, chunk: Chunk) -> None:
        """The chunk's good rows (len(chunk) > 0): write them now, or once their results are in."""
        raise NotImplementedError

    def _finish(self) -> None:
        """After the last chunk (or at IDLE): write every row still waiting."""

    def _dropped(self, slot: UnitSlot) -> None:
        """A unit given up on (a bad file): forget what was kept of it."""

    def _accept(self, chunk: Chunk) -> None:
        if chunk.unit.unit_id in self.skipped:
            return
        slot = self._slot(chunk)
        if chunk.end:
            if chunk.error is not None or chunk.piece.last:
                self._end_unit(slot, chunk.error)
            return
        try:
            self.column_types.check(chunk.schema, len(chunk) + len(chunk.rejected_reasons), chunk.unit.path)
        except InputError as error:
            self._end_unit(slot, error)
            return
        self.counts.truncated += chunk.num_truncated
        if chunk.rejected_reasons:
            self.writer.submit(slot.rejected.write, chunk.rejected_ids, chunk.rejected_reasons)
            self.counts.rejected += len(chunk.rejected_reasons)
            self.progress.advance(rows=len(chunk.rejected_reasons))
        if len(chunk):
            self._take_rows(slot, chunk)

    def _slot(self, chunk: Chunk) -> UnitSlot:
        unit = chunk.unit
        slot = self.slots.get(unit.unit_id)
        if slot is None:
            slot = self.slots[unit.unit_id] = UnitSlot(unit, RejectedWriter(self.job.output, unit.unit_id))
        if slot.writer is None and chunk.schema is not None:
            slot.writer = self._open_file(unit, chunk.schema)
        return slot

    def _end_unit(self, slot: UnitSlot, error: InputError | None) -> None:
        if error is None:
            slot.ended = True
            self._commit_if_written(slot)
            return
        del self.slots[slot.unit.unit_id]
        self.skipped.add(slot.unit.unit_id)
        self.writer.wait()  # its queued writes are done (or failed): nothing touches its files now
        slot.abort()
        self._dropped(slot)
        if not (self.job.skip_bad_files and is_unreadable_file(error)):
            self._finish()  # the units before this one are finished and kept
            self.writer.wait()
            raise error
        self.counts.bad_files.append({"path": slot.unit.path, "unit_id": slot.unit.unit_id, "error": str(error)})
        self.progress.log(f"skipping a bad file: {error}")

    def _rows_written(self, slot: UnitSlot) -> None:
        """One of the slot's open chunks has been queued for writing."""
        slot.num_open_chunks -= 1
        self._commit_if_written(slot)

    def _commit_if_written(self, slot: UnitSlot) -> None:
        if not slot.ended or slot.num_open_chunks:
            return
        del self.slots[slot.unit.unit_id]
        while self.committing and self.committing[0].committed:
            self.committing.popleft()
        self.committing.append(slot)
        self.writer.submit(self._commit, slot)

    def _commit(self, slot: UnitSlot) -> None:  # in the writer thread
        slot.rejected.close()
        path: Path = slot.writer.close()
        try:
            mark_done(self.job.output, slot.unit, slot.writer.num_rows, slot.rejected.num_rows, path.name)
        except BaseException:
            path.unlink(missing_ok=True)  # a unit's file stays only with its record (a kill in between aside)
            raise
        slot.committed = True
        self.counts.units += 1
