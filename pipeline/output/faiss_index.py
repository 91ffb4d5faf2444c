"""FAISS index over the completed units of one or more output folders: build and search."""
from __future__ import annotations

import errno
import os
import json
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from embedpipe.pipeline.inputs.column_types import widen
from embedpipe.pipeline.output.manifest import completed_units, write_json_atomic
from embedpipe.pipeline.output.layout import (CHUNK_COLUMN, EMBEDDINGS_FOLDER, INDEX_FILE, INDEX_IDS_FILE,
                                              INDEX_META_FILE)
from embedpipe.kernels.output_dtypes import OUTPUT_DTYPES
from embedpipe.pipeline.output.search_tuning import ExactNeighbours, query_rows, search_parameter, tune
from embedpipe.pipeline.output.sinks import AtomicParquetWriter, commit_file, temporary_path, writing

TRAIN_SEED = 0
READ_BATCH_ROWS = 16384


def build_index(output_dirs: list[Path], index_dir: Path, factory: str = "Flat",
                normalized: bool = True, train_size: int = 100_000, extra_meta: dict | None = None,
                in_memory: dict[Path, list[np.ndarray]] | None = None) -> dict:
    """Indexes every completed unit (unit_id order, then row order) as FAISS ids 0..N-1.

    in_memory: the vectors of some units' files ({file: its row groups' [rows, width] arrays}), as the
    job that just wrote them still holds them: decoding a file's fixed_size_list column again ran at
    ~140 MB/s, most of the index build. Used by an index that needs no training; its lists are emptied
    as their vectors are written or copied into the index, so the vectors are not held twice. A Flat
    index is streamed to its file (_write_flat_ip) while the ids are copied in a second thread.

    Writes index.faiss, index_ids.parquet (row i: id and kept columns of FAISS id i, in the
    types of all units promoted to one) and index.json (returned) into `index_dir`, each
    atomically. Metric: inner product, on L2-normalised vectors ("cosine") when `normalized` is
    False; Hamming for "binary" embeddings. Ids are not deduplicated: every row is indexed, and
    index.json counts the ids that occur more than once (`duplicate_ids`).
    """
    files = _embedding_files(output_dirs)
    schema = _common_schema(files)
    vector_type = schema.field("embedding").type
    binary = vector_type.value_type == pa.uint8()
    cosine = not binary and not normalized
    index, used_factory = new_index(factory, vector_type.list_size, binary)
    index_dir = Path(index_dir)
    ids_schema = schema.remove(schema.get_field_index("embedding"))
    search = None  # the approximate indexes' search parameter, as search_tuning.tune chose it
    with AtomicParquetWriter(index_dir / INDEX_IDS_FILE, ids_schema) as ids_file:
        if _is_flat_ip(index):  # streamed to its file while the ids are copied (both release the GIL)
            with ThreadPoolExecutor(1) as ids_thread:
                copied = ids_thread.submit(_copy_ids, files, ids_file)
                num_vectors = _write_flat_ip(_iter_vectors(files, binary, cosine, dict(in_memory or {})),
                                             index.d, _num_rows(files), index_dir / INDEX_FILE)
                num_rows, duplicate_ids = copied.result()
            if num_vectors != num_rows:  # only if a unit file changed while it was read
                raise ValueError(f"the units' files hold {num_vectors} vectors, their ids {num_rows}")
        else:
            num_rows, duplicate_ids = _copy_ids(files, ids_file)
            # IVF / HNSW: sample queries and their exact neighbours, to write the index with the nprobe /
            # efSearch that reaches the target recall (search_tuning.py)
            query_ids = query_rows(num_rows) if not binary and search_parameter(index) else np.empty(0, np.int64)
            if not index.is_trained:  # two passes: the sample, then the vectors (from the files both times)
                in_memory = None
                sample, queries = _gather(_iter_vectors(files, binary, cosine, {}),
                                          [_training_rows(num_rows, train_size), query_ids])
                _train(index, sample, used_factory)
            elif len(query_ids):  # HNSW: one more pass, for the queries
                queries = _gather(_iter_vectors(files, binary, cosine, {}), [query_ids])[0]
            exact = ExactNeighbours(queries) if len(query_ids) else None
            # the vectors held in memory are let go as they are copied into the index: its memory, not twice
            _add_all(index, _iter_vectors(files, binary, cosine, dict(in_memory or {})), exact)
            search = tune(index, queries, query_ids, exact.labels()) if exact is not None else None
            _write_faiss(index, index_dir / INDEX_FILE, binary)
    meta = {**(extra_meta or {}), "factory": used_factory, "dimension": index.d,
            "metric": "hamming" if binary else "cosine" if cosine else "inner_product",
            "dtype": _dtype_name(vector_type.value_type),
            "num_rows": num_rows, "id_column": ids_schema.names[0], "duplicate_ids": duplicate_ids,
            "embedpipe_version": version("embedpipe")}
    if search is not None:
        meta["search"] = search
    write_json_atomic(index_dir / INDEX_META_FILE, meta)
    return meta


def _embedding_files(output_dirs: list[Path]) -> list[Path]:
    """Embeddings files of completed units, in unit_id order; a unit done in two outputs is an error."""
    found: dict[str, Path] = {}
    for output_dir in output_dirs:
        for unit_id, record in completed_units(output_dir).items():
            path = Path(output_dir) / EMBEDDINGS_FOLDER / record["file_name"]
            if unit_id in found:
                raise ValueError(f"unit {unit_id!r} is done in two outputs, {found[unit_id]} and {path}; "
                                 "index each output of a job once")
            found[unit_id] = path
    if not found:
        raise ValueError(f"no completed units in {[str(d) for d in output_dirs]}")
    return [found[unit_id] for unit_id in sorted(found)]


def _common_schema(files: list[Path]) -> pa.Schema:
    """The files' schema, column types promoted across them (see column_types); empty files have no say."""
    footers = [(path, pq.ParquetFile(path)) for path in files]
    schemas = [(path, footer.schema_arrow) for path, footer in footers if footer.metadata.num_rows]
    schema = (schemas or [(files[0], footers[0][1].schema_arrow)])[0][1]
    for path, other in schemas[1:]:
        schema = widen(schema, other, path)
    return schema


def _dtype_name(value_type: pa.DataType) -> str:
    names = [name for name, stored in OUTPUT_DTYPES.items() if pa.from_numpy_dtype(stored.numpy) == value_type]
    if not names:
        raise ValueError(f"unsupported embedding value type {value_type}")
    return names[0]


def new_index(factory: str, dim: int, binary: bool):
    """(empty index, factory string used); binary indexes get the "B" form of the factory."""
    import faiss

    used_factory = _binary_factory(factory) if binary else factory
    try:
        if binary:
            return faiss.index_binary_factory(dim * 8, used_factory), used_factory
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT), used_factory
    except RuntimeError as error:
        raise ValueError(f"FAISS rejected the index factory {used_factory!r}: {error}") from error


def _binary_factory(factory: str) -> str:
    """"Flat" -> "BFlat", "IVF1024,Flat" -> "BIVF1024", "HNSW32" -> "BHNSW32"; others unchanged."""
    match = re.fullmatch(r"(Flat|IVF\d+|HNSW\d+)(,Flat)?", factory)
    return "B" + match.group(1) if match else factory


def _copy_ids(files: list[Path], ids_file: AtomicParquetWriter) -> tuple[int, int]:
    """Copies the non-embedding columns to `ids_file`; returns (rows, ids that occur more than once: of a
    --chunk-tokens job's rows, the texts' first windows)."""
    id_chunks, num_rows = [], 0
    for path in files:
        table = pq.read_table(path, columns=ids_file.schema.names)
        try:
            table = table.cast(ids_file.schema)
        except pa.ArrowInvalid as error:  # e.g. a uint64 id past the int64 it was promoted to
            raise ValueError(f"{path}: its ids or kept columns do not fit {ids_file.schema}: {error}") from error
        for batch in table.to_batches():
            ids_file.write_batch(batch.columns)
        num_rows += table.num_rows
        id_chunks.append(first_windows(table).column(0).combine_chunks())
    ids = pa.chunked_array(id_chunks, type=ids_file.schema.field(0).type)
    return num_rows, count_duplicates(ids)


def first_windows(table: pa.Table) -> pa.Table:
    """The rows of a --chunk-tokens job's table that are the first window of their text (one per input row);
    any other table whole."""
    if CHUNK_COLUMN not in table.column_names:
        return table
    return table.filter(pc.equal(table.column(CHUNK_COLUMN), 0))


def count_duplicates(ids: pa.ChunkedArray) -> int:
    """How many distinct ids occur more than once."""
    counts = pc.value_counts(ids).field("counts")
    return pc.sum(pc.greater(counts, 1)).as_py() or 0


def _iter_vectors(files: list[Path], binary: bool, cosine: bool,
                  in_memory: dict[Path, list[np.ndarray]]) -> Iterator[np.ndarray]:
    for path in files:
        if path in in_memory:
            chunks = in_memory.pop(path)
            while chunks:
                yield _prepare(chunks.pop(0), binary, cosine)
            continue
        for batch in pq.ParquetFile(path).iter_batches(READ_BATCH_ROWS, columns=["embedding"]):
            vectors = batch.column(0)
            values = vectors.flatten().to_numpy().reshape(-1, vectors.type.list_size)
            yield _prepare(values, binary, cosine)


def _is_flat_ip(index) -> bool:
    """A plain float IndexFlat of inner products ("Flat"), the one kind _write_flat_ip writes."""
    import faiss

    return type(index) in (faiss.IndexFlat, faiss.IndexFlatIP) and index.metric_type == faiss.METRIC_INNER_PRODUCT


def _num_rows(files: list[Path]) -> int:
    return sum(pq.ParquetFile(path).metadata.num_rows for path in files)


def _write_flat_ip(chunks: Iterator[np.ndarray], dim: int, num_rows: int, path: Path) -> int:
    """Writes the IndexFlatIP of the chunks' float32 vectors [n, dim] (num_rows in all) to `path`, atomically,
    in the bytes faiss.write_index writes for it (the tests compare the two files); returns the vectors written.

    Streaming the vectors to the file skips building the index in memory first: sizing its storage
    (zero-filled) and copying the vectors in were 40% of a 500k-row MiniLM index build on the H200.
    The format (faiss/impl/index_write.cpp): fourcc "IxFI"; the index header (d int32, ntotal int64,
    two int64 1 << 20, is_trained bool, metric_type int32 = 0 for inner product); the codes as a
    float count (uint64) and the floats.
    """
    temporary = temporary_path(path)
    written = 0
    try:
        with writing(path):
            with open(temporary, "wb") as file:
                file.write(b"IxFI" + struct.pack("<iqqq?iQ", dim, num_rows, 1 << 20, 1 << 20, True, 0, num_rows * dim))
                for vectors in chunks:
                    written += len(vectors)
                    if written <= num_rows:
                        file.write(memoryview(np.ascontiguousarray(vectors, dtype=np.float32)).cast("B"))
            if written == num_rows:
                commit_file(temporary, path)
    finally:  # a count that does not match, a full disk, an interrupt: no temporary is left behind
        temporary.unlink(missing_ok=True)  # (once committed, it has become `path`)
    return written


def _add_all(index, chunks: Iterator[np.ndarray], exact: ExactNeighbours | None = None) -> None:
    for vectors in chunks:
        index.add(vectors)
        if exact is not None:
            exact.add(vectors)


def _prepare(values: np.ndarray, binary: bool, cosine: bool) -> np.ndarray:
    """FAISS input: contiguous uint8 codes, or float32 (L2-normalised for cosine)."""
    if binary:
        return np.ascontiguousarray(values, dtype=np.uint8)
    if not cosine:  # FAISS copies what it adds: float32 straight from the file needs no copy of its own
        return np.ascontiguousarray(values, dtype=np.float32)
    import faiss

    vectors = np.array(values, dtype=np.float32, order="C")  # a writable copy, normalised in place
    faiss.normalize_L2(vectors)
    return vectors


def _training_rows(num_rows: int, train_size: int) -> np.ndarray:
    """The sorted rows of up to `train_size` training vectors, picked with a fixed seed."""
    if not num_rows:
        raise ValueError("the index needs training but the completed units hold no rows")
    rng = np.random.default_rng(TRAIN_SEED)
    return np.sort(rng.choice(num_rows, size=min(train_size, num_rows), replace=False))


def _gather(chunks: Iterator[np.ndarray], row_sets: list[np.ndarray]) -> list[np.ndarray]:
    """The vectors at each set of sorted row numbers, gathered in one streaming pass."""
    parts: list[list[np.ndarray]] = [[] for _ in row_sets]
    offset = 0
    for vectors in chunks:
        for rows, found in zip(row_sets, parts):
            low, high = np.searchsorted(rows, [offset, offset + len(vectors)])
            found.append(vectors[rows[low:high] - offset])
        offset += len(vectors)
    return [np.concatenate(found) if found else np.empty(0, np.float32) for found in parts]


def _train(index, sample: np.ndarray, factory: str) -> None:
    try:
        index.train(sample)
    except RuntimeError as error:
        raise ValueError(f"cannot train {factory!r} on {len(sample)} vectors: {error}") from error


def _write_faiss(index, path: Path, binary: bool) -> None:
    import faiss

    temporary = temporary_path(path)
    try:
        with writing(path):
            try:
                (faiss.write_index_binary if binary else faiss.write_index)(index, str(temporary))
            except RuntimeError as error:
                raise faiss_write_error(error) from error
            commit_file(temporary, path)
    except BaseException:  # a full disk, an interrupt: no temporary is left behind
        temporary.unlink(missing_ok=True)
        raise


def faiss_write_error(error: RuntimeError) -> OSError:
    """FAISS reports a failed write as "... failed: write error in PATH: 0 != 256 (No space left on device)": the
    OSError with the errno its reason names (a full disk is ENOSPC, as from any other write), else EIO."""
    reason = str(error).rsplit("failed: ", 1)[-1]
    named = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EIO)
    return OSError(next((code for code in named if os.strerror(code) in reason), errno.EIO), reason)


class SearchIndex:
    """A built index with its ids. Scores: inner product / cosine similarity, or for binary
    embeddings the number of matching bits (dimension - Hamming distance); higher is better."""

    def __init__(self, index, ids: pa.Table, meta: dict, nprobe: int | None = None, ef_search: int | None = None):
        self.index, self.ids, self.meta = index, ids, meta
        self.binary = meta["metric"] == "hamming"
        self.set_search_parameters(nprobe, ef_search)

    @classmethod
    def load(cls, index_dir: str | Path, nprobe: int | None = None, ef_search: int | None = None) -> SearchIndex:
        """Reads index.faiss, index_ids.parquet and index.json from `index_dir`; searches with the nprobe /
        efSearch written into index.faiss (search_tuning.py) unless given here."""
        import faiss

        index_dir = Path(index_dir)
        meta = json.loads((index_dir / INDEX_META_FILE).read_text())
        read = faiss.read_index_binary if meta["metric"] == "hamming" else faiss.read_index
        index = read(str(index_dir / INDEX_FILE))
        ids = pq.read_table(index_dir / INDEX_IDS_FILE)
        if not index.ntotal == ids.num_rows == meta["num_rows"]:
            raise ValueError(f"{index_dir}: index ({index.ntotal}), ids ({ids.num_rows}) and "
                             f"index.json ({meta['num_rows']}) row counts differ; rebuild the index")
        return cls(index, ids, meta, nprobe, ef_search)

    def set_search_parameters(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Inverted lists visited per query by IVF indexes, candidates kept by HNSW ones; each ignored by
        the other kinds, and None leaves the index's own."""
        import faiss

        for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, not {value}")
        if self.binary:
            if nprobe is not None and isinstance(self.index, faiss.IndexBinaryIVF):
                self.index.nprobe = nprobe
            if ef_search is not None and isinstance(self.index, faiss.IndexBinaryHNSW):
                self.index.hnsw.efSearch = ef_search
            return
        ivf = faiss.try_extract_index_ivf(self.index)
        if nprobe is not None and ivf is not None:
            ivf.nprobe = nprobe
        if ef_search is not None and isinstance(self.index, faiss.IndexHNSW):
            self.index.hnsw.efSearch = ef_search

    def search(self, queries: np.ndarray, k: int) -> list[list[dict]]:
        """Per query up to k hits, best first: {<kept columns>..., "id": ..., "score": float}; a --chunk-tokens
        index's hits name the window too (chunk, char_start, char_end: index_ids.parquet's columns)."""
        queries = np.atleast_2d(queries)
        width = self.index.code_size if self.binary else self.index.d
        if queries.ndim != 2 or queries.shape[1] != width or k <= 0:
            raise ValueError(f"queries must be [q, {width}] and k positive, got {queries.shape}, k={k}")
        cosine = self.meta["metric"] == "cosine"
        scores, labels = self.index.search(_prepare(queries, self.binary, cosine), k)
        if self.binary:
            scores = self.index.d - scores
        rows = iter(self.ids.take(pa.array(labels[labels >= 0])).to_pylist())
        id_column = self.meta["id_column"]
        return [[_hit(next(rows), id_column, score) for score, label in zip(row_scores, row_labels)
                 if label >= 0] for row_scores, row_labels in zip(scores, labels)]


def _hit(row: dict, id_column: str, score: float) -> dict:
    kept = {name: value for name, value in row.items() if name != id_column}
    return {**kept, "id": row[id_column], "score": float(score)}
