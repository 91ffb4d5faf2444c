"""Atomic Parquet writers: one embeddings file per unit, and the rejected rows of a unit."""
from __future__ import annotations

import contextlib
import functools
import glob
import os
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.pipeline.output.layout import EMBEDDINGS_FOLDER, REJECTED_FOLDER, unit_file

REJECTED_SCHEMA = pa.schema([("id", pa.string()), ("unit_id", pa.string()), ("reason", pa.string())])


def embedding_type(dtype_name: str) -> pa.DataType:
    """Arrow value type of one stored embedding component (output_dtypes; binary: 8 sign bits a uint8)."""
    return pa.from_numpy_dtype(output_dtype(dtype_name).numpy)


def temporary_path(final: Path) -> Path:
    """A fresh hidden file next to `final` (same filesystem, so os.replace is atomic), with the mode a
    plain open() would give `final` under the umask: mkstemp makes it 0600, so a renamed index was
    unreadable to every other user (pyarrow, FAISS and pandas honour the umask)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent)
    try:
        os.fchmod(handle, file_mode())
    finally:
        os.close(handle)
    return Path(name)


def remove_unfinished(folder: Path, final_name: str = "*") -> None:
    """Deletes the temporaries temporary_path made in `folder` for a final file name (default: for any) whose
    writer never finished; only where nobody else may be writing them."""
    pattern = "*" if final_name == "*" else glob.escape(final_name)
    for path in Path(folder).glob(f".{pattern}.tmp-*"):
        path.unlink(missing_ok=True)


_umask_lock = threading.Lock()


@functools.cache
def file_mode() -> int:
    """0o666 less the process's umask (read once: os.umask can only be read by setting it)."""
    with _umask_lock:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Names `path` in an OSError raised while writing it (pyarrow's errors name no file)."""
    try:
        yield
    except OSError as error:
        raise OSError(error.errno, f"cannot write {path}: {error.strerror or error}") from error


def commit_file(temporary: Path, final: Path) -> None:
    """fsyncs `temporary`, renames it onto `final` and fsyncs the folder (durable rename)."""
    with open(temporary, "rb") as written:
        os.fsync(written.fileno())
    os.replace(temporary, final)
    folder = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


class _CommitOnExit:
    """Context manager: close() on success, abort() on an exception."""

    def __enter__(self):
        return self

    def __exit__(self, error_type, error, traceback):
        if error_type:
            self.abort()
        else:
            self.close()


class AtomicParquetWriter(_CommitOnExit):
    """A ParquetWriter on a temporary file that becomes `final` on close() and vanishes on abort().

    `plain_columns` are written without dictionary or statistics, compressed with `plain_codec`: float
    embeddings, which none of them shrink, cost 10x the write time with the three (and a dictionary grows
    the file); int8 and binary ones take zstd (UnitWriter).
    """

    def __init__(self, final: Path, schema: pa.Schema, plain_columns: Sequence[str] = (), plain_codec: str = "none"):
        self.path = final
        self.schema = schema
        self._temporary = temporary_path(final)
        try:
            with writing(final):
                self._writer = pq.ParquetWriter(self._temporary, schema,
                                                **column_options(schema, plain_columns, plain_codec))
        except BaseException:
            self._temporary.unlink(missing_ok=True)
            raise

    def write_batch(self, arrays: list[pa.Array]) -> None:
        with writing(self.path):
            self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))

    def close(self) -> Path:
        with writing(self.path):
            self._writer.close()
            commit_file(self._temporary, self.path)
        return self.path

    def abort(self) -> None:
        with contextlib.suppress(OSError, pa.ArrowException):  # the file is discarded anyway
            self._writer.close()
        self._temporary.unlink(missing_ok=True)


def column_options(schema: pa.Schema, plain_columns: Sequence[str], plain_codec: str = "none") -> dict:
    """ParquetWriter options: the leaves of `plain_columns` without dictionary and statistics, compressed
    with `plain_codec`; the rest as by default."""
    if not plain_columns:
        return {}
    sink = pa.BufferOutputStream()  # the options name Parquet leaf paths ("embedding.list.element")
    pq.write_table(schema.empty_table(), sink)
    leaves = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    paths = [leaves.column(i).path for i in range(len(leaves))]
    rest = [path for path in paths if path.split(".")[0] not in plain_columns]
    return {"use_dictionary": rest, "write_statistics": rest,
            "compression": {path: "snappy" if path in rest else plain_codec for path in paths}}


class UnitWriter(AtomicParquetWriter):
    """Writes one unit's embeddings to OUTPUT/embeddings/<safe_name(unit_id)>.parquet, atomically.

    Schema: the id field, `embedding` as fixed_size_list<value, dim> (dim: values per row, i.e.
    bytes for "binary"), then the kept fields; fixed here so empty batches cannot change it.
    Parquet has no 8-bit type: int8 and uint8 values are stored as INT32, 4 bytes each, as large as
    float32; zstd brings them to ~1 byte (4.2x smaller than float32, tests/pipeline/output/test_sinks.py).
    A context manager: closes on success, aborts (no file left) on an exception.
    """

    def __init__(self, output_dir: str | Path, unit_id: str, dim: int, dtype_name: str,
                 id_field: pa.Field, kept_fields: Sequence[pa.Field] = ()):
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = dim
        vector_type = pa.list_(embedding_type(dtype_name), dim)
        schema = pa.schema([id_field, pa.field("embedding", vector_type, nullable=False), *kept_fields])
        final = unit_file(output_dir, EMBEDDINGS_FOLDER, unit_id)
        codec = "none" if output_dtype(dtype_name).is_float else "zstd"
        super().__init__(final, schema, plain_columns=["embedding"], plain_codec=codec)
        self.num_rows = 0

    def write(self, ids: pa.Array, embeddings: np.ndarray, kept: Sequence[pa.Array] = ()) -> None:
        """Appends a row group; `embeddings` is [n, dim] of the writer's dtype."""
        vector_type = self.schema.field("embedding").type
        expected_dtype = vector_type.value_type.to_pandas_dtype()
        if embeddings.ndim != 2 or embeddings.shape[1] != self.dim or embeddings.dtype != expected_dtype:
            raise ValueError(f"embeddings must be [n, {self.dim}] {np.dtype(expected_dtype)}, "
                             f"got {list(embeddings.shape)} {embeddings.dtype}")
        arrays = [ids, *kept]
        types = [self.schema.field(i).type for i in [0, *range(2, len(self.schema))]]
        if len(arrays) != len(types) or any(a.type != t for a, t in zip(arrays, types)):
            raise ValueError(f"id/kept types {[a.type for a in arrays]} differ from the schema {types}")
        if len(ids) != len(embeddings) or any(len(a) != len(ids) for a in kept):
            raise ValueError("ids, embeddings and kept columns must have the same length")
        if len(ids):
            flat = pa.array(np.ascontiguousarray(embeddings).reshape(-1))
            vectors = pa.FixedSizeListArray.from_arrays(flat, type=vector_type)
            self.write_batch([ids, vectors, *kept])
            self.num_rows += len(ids)


class RejectedWriter(_CommitOnExit):
    """Collects a unit's rejected rows into OUTPUT/rejected/<safe_name(unit_id)>.parquet, atomically.

    The file is created only when a row is rejected; close() with none removes a stale one.
    """

    def __init__(self, output_dir: str | Path, unit_id: str):
        self.unit_id = unit_id
        self.path = unit_file(output_dir, REJECTED_FOLDER, unit_id)
        self.num_rows = 0
        self._file: AtomicParquetWriter | None = None

    def write(self, ids: pa.Array, reasons: Sequence[str]) -> None:
        """Appends rows: ids (in the input's id type, as the embeddings keep them) and their rejection reasons."""
        if len(ids) != len(reasons):
            raise ValueError("ids and reasons must have the same length")
        if not len(ids):
            return
        if self._file is None:
            self._file = AtomicParquetWriter(self.path, REJECTED_SCHEMA.set(0, pa.field("id", ids.type)))
        unit_ids = pa.array([self.unit_id] * len(ids), pa.string())
        self._file.write_batch([ids.cast(self._file.schema.field(0).type), unit_ids, pa.array(reasons, pa.string())])
        self.num_rows += len(ids)

    def close(self) -> None:
        if self._file is None:
            self.path.unlink(missing_ok=True)
        else:
            self._file.close()

    def abort(self) -> None:
        if self._file is not None:
            self._file.abort()


def read_rejected(output_dir: str | Path) -> pa.Table:
    """All rejected rows of a job (columns id, unit_id, reason), the ids in the units' id type promoted
    across them (as the index's ids: int32 and int64 give int64); empty (string ids) when none."""
    folder = Path(output_dir) / REJECTED_FOLDER
    files = sorted(path for path in folder.glob("[!.]*.parquet")) if folder.is_dir() else []  # no temporaries
    tables = [pq.read_table(path) for path in files]
    if not tables:
        return REJECTED_SCHEMA.empty_table()
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # ids of no common type (a job refuses them): as strings
        return pa.concat_tables([t.set_column(0, "id", t.column(0).cast(pa.string())) for t in tables])
