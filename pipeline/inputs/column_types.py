"""Types of the id and kept columns across a job's files: they may widen from file to file, not change kind.

Arrow's permissive promotion decides: int32 then int64 -> int64, string then large_string ->
large_string, null (an all-null or empty column) then anything -> that. An int id column in one
file and a string one in another has no common type: the job stops at that file, naming it.
Each unit's file keeps its input's types; the index casts them all to the promoted ones.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from embedpipe.pipeline.inputs.sources import InputError


class ColumnTypeChange(InputError):
    """A column's type in one file has nothing in common with its type in the files before."""


def widen(schema: pa.Schema, other: pa.Schema, path: str | Path) -> pa.Schema:
    """The schema both fit; raises ColumnTypeChange naming `path` (other's file) and the column."""
    for field in other:  # permissive promotion makes int64 of uint64 and int64: ids beyond int64 would not fit
        if field.name in schema.names and _signs_differ_at_64_bits(schema.field(field.name).type, field.type):
            raise ColumnTypeChange(
                f"{path}: column {field.name!r} is {field.type} here but {schema.field(field.name).type} in the "
                "files before it; no integer type holds both (values beyond int64 need uint64): give the column "
                "one type in all files of a job")
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


def _signs_differ_at_64_bits(a: pa.DataType, b: pa.DataType) -> bool:
    return pa.uint64() in (a, b) and pa.types.is_signed_integer(b if a == pa.uint64() else a)


def _compatible(field: pa.Field, other: pa.Field) -> bool:
    try:
        pa.unify_schemas([pa.schema([field]), pa.schema([other])], promote_options="permissive")
        return True
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False


class ColumnTypes:
    """The id and kept columns' types of one output so far; `check` each batch read (id, text, kept...).

    A resumed job starts from its completed units' types (manifest.completed_columns)."""

    def __init__(self, schema: pa.Schema | None = None):
        self.schema = schema

    def check(self, schema: pa.Schema, num_rows: int, path: str) -> None:
        """Widens the types by a batch's id and kept columns (schema: id, text, kept...); empty batches have no say."""
        if not num_rows:
            return
        columns = schema.remove(1)  # without the text
        if self.schema is None or self.schema.equals(columns):
            self.schema = columns
        else:
            self.schema = widen(self.schema, columns, path)
