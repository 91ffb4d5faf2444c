"""Reads work units into chunks for the tokenizer pool: the texts of good rows, bad rows set aside."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pyarrow as pa

from .column_types import ColumnTypes
from .sources import ColumnSpec, InputError, UnreadableInputError, WorkUnit, find_bad_texts, read_unit

BAD_TEXT_WORDS = {"null": "null", "empty": "empty", "whitespace": "whitespace only"}


class BadRowError(InputError):
    """A null, empty or whitespace-only text under --on-bad-row fail."""


@dataclass
class Chunk:
    """One record batch of a unit without its bad rows, or (end=True) the marker after a unit's last batch.

    schema: the unit's fields (id, text, kept...); ids / kept: the good rows' columns.
    error: on an end marker, why the unit could not be read to its end.
    """

    unit: WorkUnit
    schema: pa.Schema | None = None
    ids: pa.Array | None = None
    kept: list[pa.Array] = field(default_factory=list)
    rejected_ids: pa.Array | None = None
    rejected_reasons: list[str] = field(default_factory=list)
    end: bool = False
    error: InputError | None = None

    def __len__(self) -> int:
        return 0 if self.ids is None else len(self.ids)


def is_unreadable_file(error: InputError) -> bool:
    """Whether the error is a file that cannot be read (not a column or row problem)."""
    return isinstance(error, UnreadableInputError)


def read_chunks(units: Iterable[WorkUnit], columns: ColumnSpec, read_rows: int, fail_on_bad_row: bool,
                column_types: ColumnTypes | None = None) -> Iterator[tuple[Chunk, list[str]]]:
    """(chunk, texts of its good rows) per record batch of each unit, then (end marker, [])."""
    column_types = column_types or ColumnTypes()
    for unit in units:
        error = None
        try:
            for batch in read_unit(unit, columns, read_rows):
                column_types.check(batch, unit.path)
                yield split_bad_rows(unit, batch, fail_on_bad_row)
        except InputError as read_error:
            error = read_error
        yield Chunk(unit, end=True, error=error), []


def split_bad_rows(unit: WorkUnit, batch: pa.RecordBatch, fail_on_bad_row: bool) -> tuple[Chunk, list[str]]:
    """Good rows go to the chunk and their texts to the tokenizer; bad ones to chunk.rejected_*."""
    reasons = find_bad_texts(batch.column(1))
    bad_rows = [row for row, reason in enumerate(reasons) if reason]
    if bad_rows and fail_on_bad_row:
        row = bad_rows[0]
        raise BadRowError(f"{unit.path}: the text of the row with id {batch.column(0)[row].as_py()!r} is "
                          f"{BAD_TEXT_WORDS[reasons[row]]} (--on-bad-row fail; the default, skip, "
                          "records such rows in rejected.parquet)")
    chunk = Chunk(unit, batch.schema)
    if bad_rows:
        chunk.rejected_ids = batch.column(0).take(bad_rows)
        chunk.rejected_reasons = [reasons[row] for row in bad_rows]
        batch = batch.filter(pa.array([reason is None for reason in reasons]))
    chunk.ids, chunk.kept = batch.column(0), batch.columns[2:]
    return chunk, batch.column(1).to_pylist()
