"""The index job: pending units -> pieces -> tokenizer workers -> batcher -> engine -> one Parquet file per unit.

Workers read and tokenize the pieces of the units (reader.py) and reply flat arrays; this process
cuts them into batches with numpy (ArrayBatcher) and does O(1) Python work per chunk and per batch.
The engine has up to its max_in_flight (3) batches in flight (batching/in_flight.py): batches N+1 and
N+2 are submitted before the result of batch N is read, so a GPU always has work queued while the CPU works.
The batcher is first in, first out, so results come back in input order and each unit's file is written front to back
(unit_files.py: in a background thread, committed once the unit has ended).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from embedpipe.kernels.batch import Batch
from embedpipe.kernels.engine import Engine

from embedpipe.pipeline.batching.array_batcher import ArrayBatcher
from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.batching.in_flight import InFlight
from embedpipe.pipeline.util.progress import Progress
from embedpipe.pipeline.index.reader import Chunk
from embedpipe.pipeline.index.report import EngineReport
from embedpipe.pipeline.output.sinks import UnitWriter
from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.index.unit_files import UnitFilesRunner, UnitSlot

@dataclass
class PendingRows:
    """The good rows of one chunk, waiting for their embeddings: vectors [len(chunk), width].

    Its sequences are its rows, or with late chunking its documents: sequence i's rows are then
    [row_starts[i], row_starts[i + 1]) (the windows of document i, in order)."""

    slot: UnitSlot
    chunk: Chunk
    vectors: np.ndarray
    num_filled: int = 0
    row_starts: np.ndarray | None = None

    def __post_init__(self):
        if self.chunk.spans is not None:
            self.row_starts = np.concatenate([[0], np.cumsum(self.chunk.spans[1])])

    def rows_of(self, first: int, count: int) -> tuple[int, int]:
        """The rows [start, end) of the chunk's sequences [first, first + count)."""
        if self.row_starts is None:
            return first, first + count
        return int(self.row_starts[first]), int(self.row_starts[first + count])


class UnitRunner(UnitFilesRunner):
    """Streams tokenized units through the engine into their embeddings files; see the module docstring."""

    def __init__(self, job: JobConfig, engine: Engine, progress: Progress, keep_vectors: bool = False):
        super().__init__(job, progress)
        self.engine = engine
        self.batcher = ArrayBatcher(job.batching)
        self.in_flight = InFlight(engine, job.batching.policy, self.batcher.pad_token_id, describe_row)
        # keep_vectors (the in-process engine of an unsharded Flat job, whose index this process builds):
        # a Flat index holds every vector in memory anyway, so the written ones are kept for its build
        # ({unit file: its chunks' vectors}) instead of decoding them from the files again; past
        # max_in_memory_bytes they are dropped and the build reads the files
        self.in_memory: dict[Path, list[np.ndarray]] | None = {} if keep_vectors else None
        self.in_memory_bytes, self.max_in_memory_bytes = 0, in_memory_budget()

    def report(self) -> EngineReport:
        c = self.counts
        return EngineReport(str(self.engine.device), c.units, c.rows, c.tokens, c.rejected, c.truncated,
                            self.batcher.stats, self.engine.counters.as_dict(), list(c.bad_files),
                            self.in_flight.num_splits, c.main_thread_cpu_s, c.writer_thread_cpu_s, c.chunk_wait_s,
                            c.first_chunk_s, self.engine.attention, c.input_rows)

    def _open_file(self, unit: WorkUnit, schema: pa.Schema) -> UnitWriter:
        output = self.engine.output
        kept_fields = [schema.field(i) for i in range(2, len(schema))]
        return UnitWriter(self.job.output, unit.unit_id, output.width, output.dtype, schema.field(0), kept_fields)

    def _take_rows(self, slot: UnitSlot, chunk: Chunk) -> None:
        output = self.engine.output
        rows = PendingRows(slot, chunk, np.empty((len(chunk), output.width), output.numpy_dtype))
        slot.num_open_chunks += 1
        self.batcher.add(chunk.token_ids, chunk.lengths, rows, chunk.spans)
        self._drain(flush=False)

    def _finish(self) -> None:
        self._drain(flush=True)

    def _drain(self, flush: bool) -> None:
        """Submits every full batch (with flush, every queued sequence, and reads them all). A batch whose
        launch fails is raised after the ones before it are read, so the units they complete are written
        and kept (the job then stops with the error)."""
        while (batch := self.batcher.next_batch(flush=flush)) is not None:
            self.in_flight.submit(batch, self._scatter)
        if flush:
            self.in_flight.drain()

    def _scatter(self, batch: Batch, embeddings) -> None:
        """embeddings [batch.num_rows, width] (the engine's pinned buffer) into the chunks of batch.tags (a
        batch, or an OOM half of one), writing the chunks it completes."""
        self.counts.tokens += batch.num_tokens
        self.progress.advance(rows=batch.num_rows, tokens=batch.num_tokens)
        vectors, row = embeddings.numpy(), 0
        for span in batch.tags:  # FIFO: a chunk's rows are consecutive in the batch
            rows: PendingRows = span.tag
            start, end = rows.rows_of(span.first, span.count)
            rows.vectors[start:end] = vectors[row:row + end - start]
            rows.num_filled += end - start
            row += end - start
            if rows.num_filled == len(rows.vectors) and rows.slot.unit.unit_id not in self.skipped:
                self.writer.submit(self._write_rows, rows)
                self._rows_written(rows.slot)

    def _write_rows(self, rows: PendingRows) -> None:  # in the writer thread
        rows.slot.writer.write(rows.chunk.ids, rows.vectors, rows.chunk.kept)
        self.counts.rows += len(rows.vectors)
        self.counts.input_rows += rows.chunk.num_inputs
        if self.in_memory is not None:
            self.in_memory.setdefault(rows.slot.writer.path, []).append(rows.vectors)
            self.in_memory_bytes += rows.vectors.nbytes
            if self.in_memory_bytes > self.max_in_memory_bytes:
                self.in_memory = None

    def _dropped(self, slot: UnitSlot) -> None:
        if self.in_memory is not None and slot.writer is not None:
            self.in_memory.pop(slot.writer.path, None)


def in_memory_budget() -> int:
    """Bytes of vectors a job keeps for its Flat index: a quarter of the machine's memory, at most 16 GiB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        physical = 8 << 30
    return min(physical // 4, 16 << 30)


def describe_row(tag: tuple[PendingRows, int]) -> str:
    rows, sequence = tag
    row = rows.rows_of(sequence, 1)[0]
    return f"the row with id {rows.chunk.ids[row].as_py()!r} of {rows.slot.unit.path}"
