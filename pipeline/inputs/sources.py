"""Input listing (files, folders, globs -> work units) and streaming reads of one unit."""
from __future__ import annotations

import dataclasses
import glob
import os
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pj
import pyarrow.parquet as pq

from embedpipe.pipeline.errors import UserError, one_line

FORMAT_BY_EXTENSION = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl",
                       ".ndjson": "jsonl", ".csv": "csv"}
# pyarrow decompresses jsonl/csv files with these suffixes on the fly
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4")
# a single JSON line / CSV row must fit in one block
TEXT_BLOCK_BYTES = 16 << 20
BLANK_PROBE_BYTES = 1 << 16
# An uncompressed JSONL file is cut into units of about rows_per_unit * this many bytes (64 MiB at the
# default 65,536 rows), at line ends, so a killed job resumes mid-file; a smaller one is one unit
JSONL_BYTES_PER_ROW = 1024
SCAN_BYTES = 16 << 20  # read at a time while planning a JSONL file's ranges


class InputError(UserError):
    """A problem with the user's input data; the message names the file (and column/row)."""


class UnreadableInputError(InputError):
    """A file that cannot be read at all (corrupt, truncated, not the format its name says).

    Its own class rather than a `__cause__`, so the kind survives pickling (engine processes, Ray).
    """


@dataclass(frozen=True)
class WorkUnit:
    """A resumable slice of one input file.

    parquet: row groups [start, stop); hf: rows [start, stop); jsonl/csv: the whole file (0, -1), or for a
    large uncompressed JSONL file the bytes [start, stop), whole lines, with first_row the number of lines
    before them (the rows of derived ids count from it).
    `id_prefix` is the file's path relative to the input argument it was found under.
    `fingerprint`: (bytes, mtime in ns) of the input when it was listed (a dataset folder: summed and
    newest over its files); a unit's completion record keeps it, so a re-run redoes a unit whose
    input changed since (index/plan.py). None: not known (units made by hand).
    """

    unit_id: str
    path: str
    format: str
    start: int
    stop: int
    id_prefix: str
    fingerprint: tuple[int, int] | None = None
    first_row: int = 0

    @property
    def byte_range(self) -> tuple[int, int] | None:
        """[start, stop) bytes of a JSONL unit that is part of its file; None when the unit is the whole file."""
        return (self.start, self.stop) if self.format == "jsonl" and self.stop >= 0 else None

    def __post_init__(self):  # from JSON or Ray rows a list: a tuple keeps the unit hashable
        if self.fingerprint is not None and not isinstance(self.fingerprint, tuple):
            object.__setattr__(self, "fingerprint", tuple(int(v) for v in self.fingerprint))


@dataclass(frozen=True)
class ColumnSpec:
    """Input columns: the text (or token ids), the id (None: column `id` if present, else derived), kept extras.

    token_ids names a list<integer> column of token ids to embed instead of the text (pre-tokenised input).
    keep may name the text column: the passage is then stored beside its vector (as read, before the
    prompt and truncation), for query, /v1/search and any vector database loaded from the output.
    """

    text: str = "text"
    id: str | None = None
    keep: tuple[str, ...] = ()
    token_ids: str | None = None

    def __post_init__(self):
        if "embedding" in (self.id, *self.keep):  # the unit files' vector column
            raise ValueError("`embedding` names the unit files' vector column: it cannot be the id or a kept "
                             "column (rename it in the input)")
        names = [self.source, self.id or "id", *(name for name in self.keep if name != self.source or self.token_ids)]
        if not self.text or len(set(names)) != len(names) or len(set(self.keep)) != len(self.keep):
            raise ValueError(f"text (or token ids), id and kept columns must be distinct and non-empty: "
                             f"{[self.source, self.id or 'id', *self.keep]} (the text column may be kept)")

    @property
    def source(self) -> str:
        """The column that is embedded: the token ids when given, else the text."""
        return self.token_ids or self.text


def list_units(inputs: list[str], rows_per_unit: int = 65536,
               bad_files: list[tuple[str, str]] | None = None, exclude: tuple[str, ...] = ()) -> list[WorkUnit]:
    """Lists the work units of files, folders (recursed, sorted) and glob patterns, in order.

    Inside folders, files with unknown extensions and hidden (`.`/`_`-prefixed) entries are
    ignored; each file is listed once even when reached by several arguments. A file that
    cannot be read raises InputError, or with a `bad_files` list is appended to it as
    (path, message) and left out. Files under an `exclude` folder (the job's OUTPUT, when it lies inside
    an input folder: its unit files are no input) are not listed. A folder with no input file, like a
    pattern that matches none, raises InputError: a job of nothing would "succeed" with no index.
    """
    if rows_per_unit <= 0:
        raise ValueError("rows_per_unit must be positive")
    units: list[WorkUnit] = []
    seen_paths: set[str] = set()
    path_by_prefix: dict[str, str] = {}
    excluded = tuple(os.path.realpath(folder) + os.sep for folder in exclude)
    for path, fmt, prefix in (found for arg in inputs for found in _expand(arg, excluded)):
        real = os.path.realpath(path)
        if real in seen_paths:
            continue
        seen_paths.add(real)
        if path_by_prefix.setdefault(prefix, path) != path:
            raise InputError(f"inputs {path_by_prefix[prefix]} and {path} have the same relative "
                             f"name {prefix!r}; pass their common parent folder instead")
        try:
            units.extend(_units_of(os.path.abspath(path), fmt, prefix, rows_per_unit))
        except InputError as error:
            if bad_files is None:
                raise
            bad_files.append((os.path.abspath(path), str(error)))
    return units


def _expand(arg: str, excluded: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(path, format, id_prefix) of every input that `arg` names, but those under an excluded folder."""
    found = [entry for entry in _expand_all(arg) if not os.path.realpath(entry[0]).startswith(excluded)]
    if not found and os.path.isdir(arg):
        raise InputError(f"{arg}: the folder holds no input files (.parquet, .jsonl, .csv, optionally "
                         "compressed, or saved datasets)")
    return found


def _expand_all(arg: str) -> list[tuple[str, str, str]]:
    if os.path.isdir(arg):
        return _walk(arg, arg)
    if os.path.isfile(arg):
        fmt = _format_of(arg)
        if fmt is None:
            raise InputError(f"{arg}: unsupported file type (expected one of "
                             f"{sorted(FORMAT_BY_EXTENSION)}, optionally compressed)")
        return [(arg, fmt, os.path.basename(arg))]
    if not glob.has_magic(arg):
        raise InputError(f"{arg}: no such file or folder")
    root = _glob_root(arg)
    found = []
    for match in sorted(glob.glob(arg, recursive=True)):
        found += _walk(match, root) if os.path.isdir(match) else _file_entry(match, root)
    if not found:
        raise InputError(f"{arg}: the pattern matched no input files")
    return found


def _walk(folder: str, root: str) -> list[tuple[str, str, str]]:
    found = []
    for current, dir_names, file_names in os.walk(folder):
        dir_names[:] = sorted(d for d in dir_names if not d.startswith((".", "_")))
        if "state.json" in file_names:  # a datasets.save_to_disk folder
            dir_names.clear()
            found.append((current, "hf", _relative_name(current, root)))
        elif "dataset_dict.json" not in file_names:  # a DatasetDict: only its split folders
            for name in sorted(n for n in file_names if not n.startswith((".", "_"))):
                found += _file_entry(os.path.join(current, name), root)
    return found


def _file_entry(path: str, root: str) -> list[tuple[str, str, str]]:
    fmt = _format_of(path)
    return [(path, fmt, _relative_name(path, root))] if fmt else []


def _format_of(path: str) -> str | None:
    stem, ext = os.path.splitext(path.lower())
    if ext in COMPRESSION_SUFFIXES:
        stem, ext = os.path.splitext(stem)
        return FORMAT_BY_EXTENSION.get(ext) if ext != ".parquet" else None
    return FORMAT_BY_EXTENSION.get(ext)


def _glob_root(pattern: str) -> str:
    """The folder part of a glob pattern before its first wildcard."""
    parts = pattern.split(os.sep)
    fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return os.sep.join(parts[:fixed]) or (os.sep if fixed else ".")


def _relative_name(path: str, root: str) -> str:
    relative = os.path.relpath(path, root)
    name = os.path.basename(os.path.abspath(path)) if relative == "." else relative
    return name.replace(os.sep, "/")


def _units_of(path: str, fmt: str, prefix: str, rows_per_unit: int) -> list[WorkUnit]:
    stamp = input_fingerprint(path)
    if fmt == "parquet":
        return [dataclasses.replace(unit, fingerprint=stamp) for unit in _parquet_units(path, prefix, rows_per_unit)]
    if fmt == "hf":
        num_rows = _load_hf(path).num_rows
        return [WorkUnit(f"{prefix}#rows{a:012d}-{min(a + rows_per_unit, num_rows):012d}", path, fmt, a,
                         min(a + rows_per_unit, num_rows), prefix, stamp)
                for a in range(0, num_rows, rows_per_unit)]
    if fmt == "jsonl" and not path.lower().endswith(COMPRESSION_SUFFIXES):
        ranges = _jsonl_ranges(path, rows_per_unit * JSONL_BYTES_PER_ROW)
        if len(ranges) > 1:
            return [WorkUnit(f"{prefix}#bytes{a:012d}-{b:012d}", path, fmt, a, b, prefix, stamp, first_row)
                    for a, b, first_row in ranges]
    return [WorkUnit(prefix, path, fmt, 0, -1, prefix, stamp)]


def _jsonl_ranges(path: str, unit_bytes: int) -> list[tuple[int, int, int]]:
    """(start, stop, lines before start) of consecutive byte ranges of about unit_bytes, each ending at a
    line end (the last at the file's end); one pass over the file, counting lines."""
    ranges, start, lines, lines_at_start, offset = [], 0, 0, 0, 0
    with _guarded(path, lambda: open(path, "rb")) as file:
        while block := file.read(SCAN_BYTES):
            position = 0
            while offset + len(block) - start >= unit_bytes:  # a cut falls in this block: at the next line end
                cut = block.find(b"\n", max(position, start + unit_bytes - offset - 1))
                if cut < 0:
                    break
                lines += block.count(b"\n", position, cut + 1)
                position = cut + 1
                ranges.append((start, offset + position, lines_at_start))
                start, lines_at_start = offset + position, lines
            lines += block.count(b"\n", position)
            offset += len(block)
    if offset > start:
        ranges.append((start, offset, lines_at_start))
    return ranges


def jsonl_lines(unit: WorkUnit) -> int | None:
    """Non-empty-ended lines of an uncompressed JSONL unit (its rows, but for blank lines), counted in one
    read; None for a compressed file, whose size is known only once decompressed."""
    if unit.format != "jsonl" or unit.path.lower().endswith(COMPRESSION_SUFFIXES):
        return None
    start, stop = unit.byte_range or (0, os.path.getsize(unit.path))
    lines, last = 0, b"\n"
    with open(unit.path, "rb") as file:
        file.seek(start)
        while start < stop and (block := file.read(min(SCAN_BYTES, stop - start))):
            lines, last, start = lines + block.count(b"\n"), block[-1:], start + len(block)
    return lines + (last != b"\n")  # a last line without its line end


def input_fingerprint(path: str) -> tuple[int, int]:
    """(bytes, mtime in ns) of a file; of a dataset folder, its files' summed bytes and newest mtime.
    Any rewrite of an input changes it (an edit in place keeps the size but not the mtime)."""
    try:
        if not os.path.isdir(path):
            stat = os.stat(path)
            return stat.st_size, stat.st_mtime_ns
        stats = [os.stat(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names]
        return sum(s.st_size for s in stats), max((s.st_mtime_ns for s in stats), default=0)
    except OSError as error:
        raise UnreadableInputError(f"{path}: cannot read input: {one_line(error)}") from error


def _parquet_units(path: str, prefix: str, rows_per_unit: int) -> list[WorkUnit]:
    """Groups consecutive row groups into units of about `rows_per_unit` rows. Unit names are zero-padded,
    so they (and the unit files, and the index's rows) sort in input order: rg000002 before rg000010."""
    metadata = _guarded(path, lambda: pq.read_metadata(path))
    units, start, num_rows = [], 0, 0
    for group in range(metadata.num_row_groups):
        group_rows = metadata.row_group(group).num_rows
        if num_rows and num_rows + group_rows > rows_per_unit:
            units.append(WorkUnit(f"{prefix}#rg{start:06d}-{group:06d}", path, "parquet", start, group, prefix))
            start, num_rows = group, 0
        num_rows += group_rows
    if metadata.num_row_groups:
        stop = metadata.num_row_groups
        units.append(WorkUnit(f"{prefix}#rg{start:06d}-{stop:06d}", path, "parquet", start, stop, prefix))
    return units


def read_unit(unit: WorkUnit, columns: ColumnSpec, batch_rows: int = 4096,
              rows: tuple[int, int] | None = None) -> Iterator[pa.RecordBatch]:
    """Streams a unit, or its rows [start, stop), as record batches of at most `batch_rows` rows: id, text, kept.

    Row numbers count from the file's start (a saved dataset's: from its start); JSONL and CSV
    units are read whole. The id column keeps its name and type; without one, a string column `id`
    holds `f"{unit.id_prefix}:{row}"`. Text columns of type binary/large_binary are decoded as
    UTF-8, invalid bytes replaced by U+FFFD; an all-null column counts as text. At least one
    (possibly empty) batch is yielded, so the schema is known.
    """
    open_format = {"parquet": _open_parquet, "jsonl": _open_jsonl, "csv": _open_csv, "hf": _open_hf}
    try:
        schema, batches, first_row = open_format[unit.format](unit, columns, batch_rows, rows)
        id_column = _check_schema(schema, columns, unit.path)
        out_schema = None
        for batch in _rechunk(batches, batch_rows):
            out = _shape_batch(batch, columns, id_column, unit, first_row)
            out_schema, first_row = out.schema, first_row + batch.num_rows
            yield out
        if out_schema is None:
            empty = pa.RecordBatch.from_pylist([], schema=schema)
            yield _shape_batch(empty, columns, id_column, unit, first_row)
    except (pa.ArrowException, OSError) as error:
        raise UnreadableInputError(f"{unit.path}: cannot read {unit.format} input: {one_line(error)}") from error


def unit_schema(unit: WorkUnit, columns: ColumnSpec) -> pa.Schema | None:
    """The schema of the batches read_unit yields for a Parquet or saved-dataset unit (id, text, kept),
    from its footer or features without reading rows; None for JSONL / CSV, typed only once read."""
    if unit.format not in ("parquet", "hf"):
        return None
    try:
        schema = _parquet_file(unit.path).schema_arrow if unit.format == "parquet" \
            else _load_hf(unit.path).features.arrow_schema
        empty = pa.RecordBatch.from_pylist([], schema=schema)
        return _shape_batch(empty, columns, _check_schema(schema, columns, unit.path), unit, 0).schema
    except (pa.ArrowException, OSError) as error:
        raise UnreadableInputError(f"{unit.path}: cannot read {unit.format} input: {one_line(error)}") from error


def unit_rows(unit: WorkUnit) -> tuple[int, int] | None:
    """The unit's rows [start, stop) (file row numbers); None for a JSONL / CSV unit, read whole."""
    if unit.format == "hf":
        return unit.start, unit.stop
    if unit.format == "parquet":
        starts = _group_starts(_parquet_file(unit.path).metadata)
        return int(starts[unit.start]), int(starts[unit.stop])
    return None


def file_metadata(unit: WorkUnit) -> dict[bytes, bytes]:
    """The key-value metadata of a Parquet unit's schema ({} for other formats)."""
    if unit.format != "parquet":
        return {}
    try:
        return _parquet_file(unit.path).schema_arrow.metadata or {}
    except (pa.ArrowException, OSError) as error:
        raise UnreadableInputError(f"{unit.path}: cannot read parquet input: {one_line(error)}") from error


def _open_parquet(unit: WorkUnit, columns: ColumnSpec, batch_rows: int, rows: tuple[int, int] | None):
    parquet = _parquet_file(unit.path)
    schema = parquet.schema_arrow
    start, stop = rows or unit_rows(unit)
    wanted = [n for n in (columns.id or "id", columns.source, *columns.keep) if n in schema.names]
    return schema, _parquet_rows(parquet, unit.path, wanted, start, stop, batch_rows), start


def _parquet_rows(parquet: pq.ParquetFile, path: str, wanted: list[str], start: int, stop: int,
                  batch_rows: int) -> Iterator[pa.RecordBatch]:
    """Rows [start, stop) of the file: whole row groups streamed, the parts of cut ones sliced."""
    starts = _group_starts(parquet.metadata)
    for group in range(int(np.searchsorted(starts, start, side="right")) - 1, len(starts) - 1):
        first, last = int(starts[group]), int(starts[group + 1])
        if first >= stop:
            return
        if start <= first and last <= stop:
            yield from parquet.iter_batches(batch_rows, row_groups=[group], columns=wanted)
        else:  # a piece of a row group that other pieces share: decoded once per process (see _row_group)
            lo, hi = max(start, first) - first, min(stop, last) - first
            yield from _row_group(parquet, path, group, wanted).slice(lo, hi - lo).to_batches(batch_rows)


_row_group_cache: dict[tuple, pa.Table] = {}


def _row_group(parquet: pq.ParquetFile, path: str, group: int, wanted: list[str]) -> pa.Table:
    """One decoded row group, the last one asked for kept: the pieces of a large row group go to
    several workers, and each decodes it once instead of once per piece."""
    key = (_file_key(path), group, tuple(wanted))
    if key not in _row_group_cache:
        _row_group_cache.clear()
        _row_group_cache[key] = parquet.read_row_group(group, columns=wanted)
    return _row_group_cache[key]


_parquet_cache: dict[tuple, pq.ParquetFile] = {}
MAX_OPEN_PARQUET = 8


def _parquet_file(path: str) -> pq.ParquetFile:
    """An open ParquetFile with its footer, reused while the file is unchanged (workers read many pieces of one
    file)."""
    key = _file_key(path)
    if key not in _parquet_cache:
        if len(_parquet_cache) >= MAX_OPEN_PARQUET:
            _parquet_cache.pop(next(iter(_parquet_cache)))
        _parquet_cache[key] = pq.ParquetFile(path)
    return _parquet_cache[key]


def _file_key(path: str) -> tuple:
    stat = os.stat(path)
    return path, stat.st_mtime_ns, stat.st_size, stat.st_ino


def _group_starts(metadata: pq.FileMetaData) -> np.ndarray:
    """[num_row_groups + 1]: the first row of each row group, then the file's row count."""
    sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])


def _open_jsonl(unit: WorkUnit, columns: ColumnSpec, batch_rows: int, rows=None):
    source = _jsonl_source(unit)
    if _is_blank(source()):
        return _blank_schema(columns), iter(()), unit.first_row
    read_options = pj.ReadOptions(block_size=TEXT_BLOCK_BYTES)
    reader = pj.open_json(source(), read_options=read_options)
    text_field = reader.schema.field(columns.text) if columns.text in reader.schema.names else None
    if text_field is not None and pa.types.is_null(text_field.type) and columns.token_ids is None:
        # all null in the first block: type it as string so later strings do not fail the read
        parse_options = pj.ParseOptions(explicit_schema=pa.schema([(columns.text, pa.string())]),
                                        unexpected_field_behavior="infer")
        reader = pj.open_json(source(), read_options=read_options, parse_options=parse_options)
    return reader.schema, reader, unit.first_row


def _jsonl_source(unit: WorkUnit):
    """() -> what pyarrow reads: the file's path, or a buffer of the unit's byte range (a new one per call)."""
    if unit.byte_range is None:
        return lambda: unit.path
    start, stop = unit.byte_range
    with open(unit.path, "rb") as file:
        file.seek(start)
        data = file.read(stop - start)
    return lambda: pa.BufferReader(data)


def _open_csv(unit: WorkUnit, columns: ColumnSpec, batch_rows: int, rows=None):
    """CSV is untyped: the text and id columns are read as strings (keeps ids like "007")."""
    if _is_blank(unit.path):
        return _blank_schema(columns), iter(()), 0
    as_strings = {columns.text: pa.string(), columns.id or "id": pa.string()}
    reader = pcsv.open_csv(unit.path, read_options=pcsv.ReadOptions(block_size=TEXT_BLOCK_BYTES),
                           parse_options=pcsv.ParseOptions(newlines_in_values=True),
                           convert_options=pcsv.ConvertOptions(column_types=as_strings))
    return reader.schema, reader, 0


def _is_blank(path) -> bool:
    """Whether a JSONL / CSV file (compressed or not; or a buffer) holds nothing but whitespace: zero rows."""
    with (pa.input_stream(path, compression="detect") if isinstance(path, str) else path) as stream:
        head = stream.read(BLANK_PROBE_BYTES)
    return len(head) < BLANK_PROBE_BYTES and not head.strip()


def _blank_schema(columns: ColumnSpec) -> pa.Schema:
    """The wanted columns of a blank file, typed null (a type that takes no side: see column_types)."""
    return pa.schema([(name, pa.null()) for name in (columns.id, columns.source, *columns.keep) if name])


def _open_hf(unit: WorkUnit, columns: ColumnSpec, batch_rows: int, rows: tuple[int, int] | None):
    dataset = _load_hf(unit.path)
    schema = dataset.features.arrow_schema
    start, stop = rows or (unit.start, unit.stop)
    wanted = [n for n in (columns.id or "id", columns.source, *columns.keep) if n in schema.names]
    rows = dataset.select_columns(wanted).select(range(start, stop)).with_format("arrow")  # memory-mapped
    batches = (b for table in rows.iter(batch_size=batch_rows) for b in table.to_batches())
    return schema, batches, start


def _check_schema(schema: pa.Schema, columns: ColumnSpec, path: str) -> str | None:
    """Validates the input columns; returns the id column's name (None: ids are derived)."""
    existing = ", ".join(schema.names)
    kind = "token ids" if columns.token_ids else "text"
    if columns.source not in schema.names:
        raise InputError(f"{path}: {kind} column {columns.source!r} not found; columns are: {existing}")
    if columns.id is not None and columns.id not in schema.names:
        raise InputError(f"{path}: id column {columns.id!r} not found; columns are: {existing}")
    missing = [name for name in columns.keep if name not in schema.names]
    if missing:
        raise InputError(f"{path}: kept column(s) {missing} not found; columns are: {existing}")
    source_type = schema.field(columns.source).type
    if columns.token_ids and not (_is_token_ids_type(source_type) or pa.types.is_null(source_type)):
        raise InputError(f"{path}: token ids column {columns.source!r} has type {source_type}, not a list of integers")
    if not columns.token_ids and not _is_text_type(source_type):
        raise InputError(f"{path}: text column {columns.text!r} has type {source_type}, not a string")
    id_name = columns.id or ("id" if "id" in schema.names else None)
    if id_name is not None and pa.types.is_floating(schema.field(id_name).type):
        raise InputError(f"{path}: id column {id_name!r} has type {schema.field(id_name).type}; ids are integers or "
                         "strings, kept exactly (JSON numbers beyond int64 are read as floats, which round them: "
                         "write such ids as strings)")
    return id_name


def _is_token_ids_type(arrow_type: pa.DataType) -> bool:
    return ((pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type))
            and pa.types.is_integer(arrow_type.value_type))


def _is_text_type(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        return _is_text_type(arrow_type.value_type)
    return (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_string_view(arrow_type) or pa.types.is_null(arrow_type)
            or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type))


def _rechunk(batches, max_rows: int) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for offset in range(0, batch.num_rows, max_rows):
            yield batch.slice(offset, max_rows)


def _shape_batch(batch: pa.RecordBatch, columns: ColumnSpec, id_column: str | None,
                 unit: WorkUnit, first_row: int) -> pa.RecordBatch:
    if id_column is None:
        row_numbers = pa.array(np.arange(first_row, first_row + batch.num_rows)).cast(pa.string())
        ids, id_name = pc.binary_join_element_wise(f"{unit.id_prefix}:", row_numbers, ""), "id"
    else:
        ids, id_name = batch.column(id_column), id_column
        if ids.null_count:
            null_row = first_row + pc.index(ids.is_null(), True).as_py()
            raise InputError(f"{unit.path}: id column {id_name!r} is null at row {null_row}")
    source = batch.column(columns.source)
    if not columns.token_ids:
        source = _as_text(source)  # a kept text column is stored as this string column too
    arrays = [_without_view(ids), source,
              *(source if n == columns.source else _without_view(batch.column(n)) for n in columns.keep)]
    return pa.RecordBatch.from_arrays(arrays, names=[id_name, columns.source, *columns.keep])


def _without_view(column: pa.Array) -> pa.Array:
    """string_view / binary_view as string / binary: the same values, and Arrow's take() has no view kernels."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}.get(column.type)
    return column if plain is None else column.cast(plain)


def _as_text(texts: pa.Array) -> pa.Array:
    """Casts a text-typed column to string/large_string; bad UTF-8 bytes become U+FFFD."""
    if pa.types.is_dictionary(texts.type):
        texts = texts.dictionary_decode()
    if pa.types.is_large_binary(texts.type):
        return _decode_utf8(texts, pa.large_string())
    if pa.types.is_binary(texts.type):
        return _decode_utf8(texts, pa.string())
    if pa.types.is_string_view(texts.type) or pa.types.is_null(texts.type):
        return texts.cast(pa.string())
    return texts


def _decode_utf8(data: pa.Array, text_type: pa.DataType) -> pa.Array:
    try:
        return data.cast(text_type)
    except pa.ArrowInvalid:  # invalid UTF-8 somewhere: decode in Python with replacement
        decoded = [None if b is None else b.decode("utf-8", "replace") for b in data.to_pylist()]
        return pa.array(decoded, text_type)


def bad_text_reasons(texts: pa.Array) -> np.ndarray:
    """[len(texts)] str: "" for a usable text, else the reason "null", "empty" or "whitespace"."""
    is_null = texts.is_null().to_numpy(zero_copy_only=False)
    is_empty = pc.equal(pc.binary_length(texts), 0).fill_null(False).to_numpy(zero_copy_only=False)
    is_space = pc.utf8_is_space(texts).fill_null(False).to_numpy(zero_copy_only=False)
    return np.select([is_null, is_empty, is_space], ["null", "empty", "whitespace"], "")


_hf_cache: dict[tuple, object] = {}


def _load_hf(path: str):
    """The saved dataset, reused while its state.json is unchanged (workers read many slices of one)."""
    import datasets

    key = _file_key(os.path.join(path, "state.json")) if os.path.isfile(os.path.join(path, "state.json")) else None
    if key is None or key not in _hf_cache:
        dataset = _guarded(path, lambda: datasets.load_from_disk(path))
        if key is None:
            return dataset
        _hf_cache.clear()
        _hf_cache[key] = dataset
    return _hf_cache[key]


def _guarded(path: str, read: Callable):
    """Runs `read`, turning library read errors into an UnreadableInputError naming `path`."""
    try:
        return read()
    except (pa.ArrowException, OSError, ValueError) as error:
        raise UnreadableInputError(f"{path}: cannot read input: {one_line(error)}") from error
