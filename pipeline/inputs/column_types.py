"""Types of the id and kept columns across a job's files: they may widen from file to file, not change kind.

Arrow's permissive promotion decides: int32 then int64 -> int64, string then large_string ->
large_string, null (an all-null or empty column) then anything -> that. An int id column in one
file and a string one in another has no common type: the job stops at that file, naming it.
Each unit's file keeps its input's types; the index casts them all to the promoted ones.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.output.layout import EMBEDDINGS_FOLDER
from embedpipe.pipeline.inputs.sources import ColumnSpec, InputError, WorkUnit, unit_rows, unit_schema


class ColumnTypeChange(InputError):
    """A column's type in one file has nothing in common with its type in the files before."""


def widen(schema: pa.Schema, other: pa.Schema, path: str | Path) -> pa.Schema:
    """The schema both fit; raises ColumnTypeChange naming `path` (other's file) and the column."""
    try:
        return pa.unify_schemas([schema, other], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for field in other:
            if field.name in schema.names and not _compatible(schema.field(field.name), field):
                raise ColumnTypeChange(
                    f"{path}: column {field.name!r} is {field.type} here but {schema.field(field.name).type} in "
                    "the files before it; a column must keep one kind of type (integer, string, ...) in all "
                    "files of a job") from None
        raise


def _compatible(field: pa.Field, other: pa.Field) -> bool:
    try:
        pa.unify_schemas([pa.schema([field]), pa.schema([other])], promote_options="permissive")
        return True
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False


class ColumnTypes:
    """The id and kept columns' types of one output so far; `check` each batch read (id, text, kept...)."""

    def __init__(self, schema: pa.Schema | None = None):
        self.schema = schema

    @classmethod
    def of_output(cls, output: Path, folder: str = EMBEDDINGS_FOLDER) -> ColumnTypes:
        """Starts from the types of the output's completed units, so a resumed job checks against them.

        A unit file holds the id, the embedding (or, from `tokenize`, the token ids), then the kept columns."""
        for record in completed_units(output, folder).values():
            if record["num_rows"]:
                return cls(pq.read_schema(output / folder / record["file_name"]).remove(1))
        return cls()

    def check(self, schema: pa.Schema, num_rows: int, path: str) -> None:
        """Widens the types by a batch's id and kept columns (schema: id, text, kept...); empty batches have no say."""
        if not num_rows:
            return
        columns = schema.remove(1)  # without the text
        if self.schema is None or self.schema.equals(columns):
            self.schema = columns
        else:
            self.schema = widen(self.schema, columns, path)


def check_job_types(output: Path, units: list[WorkUnit], columns: ColumnSpec,
                    folder: str = EMBEDDINGS_FOLDER) -> None:
    """Before anything is embedded: the id and kept columns of the job's Parquet and dataset units keep
    one kind of type across its files (in unit order, after the output's completed units), as
    ColumnTypes checks each batch read. Raises ColumnTypeChange naming the first file that breaks it,
    for every shard of a job alike, so a --devices or Ray job fails at its start instead of at the
    index build. JSONL and CSV files are checked as they are read; a file that cannot be read is left
    to the reader, which reports (or skips) it."""
    types = ColumnTypes.of_output(output, folder)
    for unit in units:
        try:
            schema, rows = unit_schema(unit, columns), unit_rows(unit)
        except InputError:
            continue
        if schema is not None:
            types.check(schema, rows[1] - rows[0], unit.path)
