"""The index job: pending units -> reader -> tokenizer pool -> batcher -> engine -> one Parquet file per unit.

The engine has at most two batches in flight: batch N+1 is submitted before the result of batch
N is read, so a GPU always has the next batch queued while the CPU writes, reads and tokenizes.
The batcher is first in, first out, so results come back in input order and each unit's file is
written front to back; a unit is recorded as done once its file is renamed into place.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from embedpipe.kernels.batch import Batch
from embedpipe.kernels.engine import Engine
from embedpipe.kernels.lazy_tensor import LazyTensor

from .batcher import TokenBudgetBatcher
from .column_types import ColumnTypes
from .config import JobConfig
from .manifest import mark_done
from .oom_split import SplitOnOutOfMemory
from .progress import Progress
from .reader import Chunk, is_unreadable_file, read_chunks
from .run_report import EngineReport
from .sinks import RejectedWriter, UnitWriter
from .sources import InputError, WorkUnit
from .tokenizer_pool import TokenizedChunk, TokenizerPool

MAX_IN_FLIGHT = 2


@dataclass
class UnitSlot:
    """A unit being written: its two writers and how many of its chunks still wait for embeddings."""

    unit: WorkUnit
    rejected: RejectedWriter
    writer: UnitWriter | None = None
    num_open_chunks: int = 0
    ended: bool = False  # its last chunk has been queued
    failed: bool = False  # unreadable: its remaining results are dropped

    def abort(self) -> None:
        self.failed = True
        self.rejected.abort()
        if self.writer is not None:
            self.writer.abort()


@dataclass
class PendingRows:
    """The good rows of one chunk, waiting for their embeddings: vectors [len(chunk), width]."""

    slot: UnitSlot
    chunk: Chunk
    vectors: np.ndarray
    num_filled: int = 0


@dataclass
class RunCounts:
    units: int = 0
    rows: int = 0
    tokens: int = 0
    rejected: int = 0
    truncated: int = 0
    bad_files: list[dict] = field(default_factory=list)


def read_and_tokenize(job: JobConfig, pool: TokenizerPool,
                      units: Iterable[WorkUnit]) -> Iterator[tuple[Chunk, TokenizedChunk]]:
    """The units' chunks with their token ids; `units` is read lazily (it may be a shared queue)."""
    return pool.map(read_chunks(units, job.columns, job.read_rows, job.on_bad_row == "fail",
                                ColumnTypes.of_output(job.output)))


class UnitRunner:
    """Streams tokenized units through the engine into their files; see the module docstring."""

    def __init__(self, job: JobConfig, engine: Engine, progress: Progress):
        self.job, self.engine, self.progress = job, engine, progress
        self.batcher = TokenBudgetBatcher(job.batching)
        self.oom = SplitOnOutOfMemory(engine, job.batching.policy, self.batcher.pad_token_id, describe_row)
        self.in_flight: deque[tuple[Batch, LazyTensor]] = deque()
        self.slots: dict[str, UnitSlot] = {}
        self.counts = RunCounts()

    def run(self, tokenized: Iterable[tuple[Chunk, TokenizedChunk]]) -> RunCounts:
        """Embeds and writes the units of `tokenized` (read_and_tokenize's chunks, or the same made elsewhere)."""
        try:
            for chunk, chunk_tokens in tokenized:
                self._accept(chunk, chunk_tokens)
            self._drain(flush=True)
        except BaseException:
            for slot in self.slots.values():  # no partial file survives; done units stay done
                slot.abort()
            raise
        return self.counts

    def report(self) -> EngineReport:
        c = self.counts
        return EngineReport(str(self.engine.device), c.units, c.rows, c.tokens, c.rejected, c.truncated,
                            self.batcher.stats, self.engine.counters.as_dict(), list(c.bad_files),
                            self.oom.num_splits)

    def _accept(self, chunk: Chunk, tokenized: TokenizedChunk) -> None:
        slot = self._slot(chunk)
        if chunk.end:
            self._end_unit(slot, chunk.error)
            return
        self.counts.truncated += tokenized.num_truncated
        if chunk.rejected_reasons:
            slot.rejected.write(chunk.rejected_ids, chunk.rejected_reasons)
            self.counts.rejected += len(chunk.rejected_reasons)
            self.progress.advance(rows=len(chunk.rejected_reasons))
        if len(chunk):
            rows = PendingRows(slot, chunk, np.empty((len(chunk), self.engine.output.width),
                                                     self.engine.output.numpy_dtype))
            slot.num_open_chunks += 1
            for row, token_ids in enumerate(tokenized.sequences()):
                self.batcher.add(token_ids, (rows, row))
            self._drain(flush=False)

    def _slot(self, chunk: Chunk) -> UnitSlot:
        unit = chunk.unit
        slot = self.slots.get(unit.unit_id)
        if slot is None:
            slot = self.slots[unit.unit_id] = UnitSlot(unit, RejectedWriter(self.job.output, unit.unit_id))
        if slot.writer is None and chunk.schema is not None:
            output = self.engine.output
            kept_fields = [chunk.schema.field(i) for i in range(2, len(chunk.schema))]
            slot.writer = UnitWriter(self.job.output, unit.unit_id, output.width, output.dtype,
                                     chunk.schema.field(0), kept_fields)
        return slot

    def _end_unit(self, slot: UnitSlot, error: InputError | None) -> None:
        if error is None:
            slot.ended = True
            self._finish_if_written(slot)
            return
        slot.abort()
        del self.slots[slot.unit.unit_id]
        if not (self.job.skip_bad_files and is_unreadable_file(error)):
            self._drain(flush=True)  # the units before this one are finished and kept
            raise error
        self.counts.bad_files.append({"path": slot.unit.path, "unit_id": slot.unit.unit_id, "error": str(error)})
        self.progress.log(f"skipping a bad file: {error}")

    def _drain(self, flush: bool) -> None:
        """Submits every full batch (with flush, every queued sequence); collects all but the newest."""
        while (batch := self.batcher.next_batch(flush=flush)) is not None:
            self.in_flight.append((batch, self.oom.step(batch)))
            if len(self.in_flight) == MAX_IN_FLIGHT:  # batch N+1 is queued: now wait for batch N
                self._collect(*self.in_flight.popleft())
        while flush and self.in_flight:
            self._collect(*self.in_flight.popleft())

    def _collect(self, batch: Batch, handle: LazyTensor) -> None:
        """Copies a batch's embeddings [num_seqs, width] to their chunks, writing the chunks it completes."""
        vectors = self.oom.result(batch, handle).numpy()
        self.counts.tokens += batch.num_tokens
        self.progress.advance(rows=batch.num_seqs, tokens=batch.num_tokens)
        row = 0
        while row < batch.num_seqs:  # FIFO: a chunk's rows are consecutive in the batch
            rows, start = batch.tags[row]
            count = min(len(rows.vectors) - start, batch.num_seqs - row)
            rows.vectors[start:start + count] = vectors[row:row + count]
            rows.num_filled += count
            row += count
            if rows.num_filled == len(rows.vectors):
                self._write(rows)

    def _write(self, rows: PendingRows) -> None:
        slot = rows.slot
        slot.num_open_chunks -= 1
        if slot.failed:
            return
        slot.writer.write(rows.chunk.ids, rows.vectors, rows.chunk.kept)
        self.counts.rows += len(rows.vectors)
        self._finish_if_written(slot)

    def _finish_if_written(self, slot: UnitSlot) -> None:
        if not slot.ended or slot.num_open_chunks:
            return
        slot.rejected.close()
        path: Path = slot.writer.close()
        try:
            mark_done(self.job.output, slot.unit, slot.writer.num_rows, slot.rejected.num_rows, path.name)
        except BaseException:
            path.unlink(missing_ok=True)  # a unit's file stays only with its record (a kill in between aside)
            raise
        del self.slots[slot.unit.unit_id]
        self.counts.units += 1


def describe_row(tag: tuple[PendingRows, int]) -> str:
    rows, row = tag
    return f"the row with id {rows.chunk.ids[row].as_py()!r} of {rows.slot.unit.path}"
