"""`embedpipe verify`: checks that output folders hold exactly the embeddings and the index of their job.

  units    every unit of the job (units.json) is done, in exactly one of the outputs
  files    each unit's file has its recorded rows and job.json's dimension and dtype
  vectors  no NaN and no all-zero embedding
  index    index.json, index.faiss and index_ids.parquet: as many rows as the embeddings, their
           ids in FAISS order, job.json's settings, dimension and dtype
  input    (given the inputs) each input row's id is in the output or rejected.parquet exactly
           as often as in the input; of a --chunk-tokens job, each input row has its windows exactly
           once, covering its text (windows.py)
Ids that occur more than once are a warning: `index` keeps every row, as its input has them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.pipeline.errors import one_line
from embedpipe.pipeline.inputs.column_types import ColumnTypeChange, widen
from embedpipe.pipeline.output.faiss_index import count_duplicates
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.output.layout import EMBEDDINGS_FOLDER, INDEX_FILE, INDEX_IDS_FILE, INDEX_META_FILE, UNITS_FILE
from embedpipe.pipeline.output.job_files import INDEX_NAMES, INDEX_OWNED_KEYS, IncompleteOutputs, read_settings
from embedpipe.pipeline.output.sinks import embedding_type
from embedpipe.pipeline.verify.inputs import check_input
from embedpipe.pipeline.verify.report import Report
from embedpipe.pipeline.verify.windows import check_windows, first_window_ids

READ_ROWS = 65536


def verify(output_dirs: list[Path], index_dir: Path, inputs: list[str] | None = None) -> Report:
    """Runs every check; raises IncompleteOutputs when a folder is not an output of the job of the first."""
    settings = read_settings(output_dirs[0])
    for other in output_dirs[1:]:
        if read_settings(other) != settings:
            raise IncompleteOutputs(f"{other} was written with other settings than {output_dirs[0]} (compare "
                                    "their job.json); verify the outputs of one job together")
    report = Report()
    files = check_units(output_dirs, report)
    ids = check_files(files, settings, report) if files else None
    if ids is None:
        return report
    check_index(index_dir, settings, ids, report)
    chunked = settings.get("chunk_tokens") is not None  # rows are windows (ChunkConfig.settings)
    duplicates = count_duplicates(first_window_ids([path for path, _ in files], ids) if chunked else ids)
    if duplicates:
        report.warn(f"{duplicates:,} ids occur more than once; index keeps every row, as the input has them")
    if inputs and chunked:
        check_windows(inputs, settings, output_dirs, report)
    elif inputs:
        check_input(inputs, settings, ids, output_dirs, report)
    return report


def check_units(output_dirs: list[Path], report: Report) -> list[tuple[Path, dict]]:
    """(embeddings file, completion record) of each done unit, in unit_id order (the index's order)."""
    lists = [json.loads((d / UNITS_FILE).read_text())["units"] for d in output_dirs if (d / UNITS_FILE).is_file()]
    listed: set[str] = set().union(*lists)
    found: dict[str, tuple[Path, dict]] = {}
    twice = []
    for output_dir in output_dirs:
        for unit_id, record in completed_units(output_dir).items():
            twice += [unit_id] if unit_id in found else []
            found[unit_id] = (output_dir / EMBEDDINGS_FOLDER / record["file_name"], record)
    missing = sorted(listed - found.keys())
    if missing or not listed:
        report.check(False, "", f"units: {len(missing):,} of the job's {len(listed):,} units are not done "
                                f"(first: {missing[0]!r})" if missing else f"units: no units listed in {UNITS_FILE}")
    else:
        report.check(True, f"units: all {len(listed):,} units of the job are done", "")
    report.check(not twice, "units: each is done once",
                 f"units: {len(twice)} units are done in two outputs (first: {twice[:1]})")
    stale = sorted(found.keys() - listed)
    if stale:
        report.warn(f"{len(stale)} done units are not units of the job (e.g. {stale[0]!r}): left from older inputs")
    return [found[unit_id] for unit_id in sorted(found)]


def check_files(files: list[tuple[Path, dict]], settings: dict, report: Report) -> pa.ChunkedArray | None:
    """Checks each file's rows, dimension, dtype and vectors; returns all ids in order (None: their types clash)."""
    width = output_dtype(settings["dtype"]).width(settings["dim"])
    expected = pa.list_(embedding_type(settings["dtype"]), width)
    wrong, num_bad, first_bad, id_chunks, schemas, unreadable = [], 0, None, [], [], []
    for path, record in files:
        try:
            footer = pq.ParquetFile(path)
            vector_type = footer.schema_arrow.field("embedding").type
            ids, bad_ids = read_ids_and_bad_vectors(footer)
        except (pa.ArrowException, OSError, KeyError) as error:  # truncated, overwritten, not Parquet
            unreadable.append(f"{path}: {one_line(error)}")
            continue
        if vector_type != expected or footer.metadata.num_rows != record["num_rows"]:
            wrong.append(f"{path.name}: {footer.metadata.num_rows} rows of {vector_type}")
        num_bad += len(bad_ids)
        first_bad = first_bad or (f"id {bad_ids[0].as_py()!r} in {path.name}" if len(bad_ids) else None)
        id_chunks.append(ids)
        schemas += [(path, footer.schema_arrow)] if len(ids) else []
    report.check(not unreadable, "files: every unit file reads",
                 f"files: {len(unreadable)} unit files cannot be read (first: {unreadable[:1]}); run the same index "
                 "command again: it redoes their units")
    report.check(not wrong, f"files: {len(files):,} files hold their recorded rows of {expected}",
                 f"files: {len(wrong)} files differ from their records or from {expected} (first: {wrong[:1]}); "
                 "the same index command redoes units whose files lost rows")
    report.check(not num_bad, "vectors: no NaN or all-zero vector",
                 f"vectors: {num_bad:,} NaN or all-zero vectors (first: {first_bad})")
    if unreadable:
        return None  # the index cannot be compared with embeddings that cannot be read
    try:  # a job of zero rows: the files' own id type
        id_type = common_id_type(schemas) if schemas else (id_chunks[0].type if id_chunks else pa.string())
    except ColumnTypeChange as error:
        report.check(False, "", f"files: {error}")
        return None
    return pa.chunked_array([ids.cast(id_type) for ids in id_chunks], type=id_type)



def common_id_type(schemas: list[tuple[Path, pa.Schema]]) -> pa.DataType:
    """The id type the index casts the files' ids to (see column_types)."""
    schema = schemas[0][1] if schemas else pa.schema([("id", pa.null())])
    for path, other in schemas[1:]:
        schema = widen(schema, other, path)
    return schema.field(0).type


def read_ids_and_bad_vectors(footer: pq.ParquetFile) -> tuple[pa.Array, pa.Array]:
    """A file's ids, and the ids of its NaN or all-zero embeddings (read in slices)."""
    ids, bad = [], []
    for batch in footer.iter_batches(READ_ROWS, columns=[footer.schema_arrow.names[0], "embedding"]):
        vectors = batch.column(1)
        values = vectors.flatten().to_numpy(zero_copy_only=False).reshape(len(batch), vectors.type.list_size)
        is_bad = ~values.any(axis=1)  # all zero (for binary: every bit 0)
        if np.issubdtype(values.dtype, np.floating):
            is_bad |= np.isnan(values).any(axis=1)
        bad.append(batch.column(0).filter(pa.array(is_bad)))
        ids.append(batch.column(0))
    id_type = footer.schema_arrow.field(0).type
    return pa.chunked_array(ids, id_type).combine_chunks(), pa.chunked_array(bad, id_type).combine_chunks()


def check_index(index_dir: Path, settings: dict, ids: pa.ChunkedArray, report: Report) -> None:
    """index.json, index.faiss and index_ids.parquet against the embeddings and job.json; a file that is
    missing or cannot be read is a FAIL naming it."""
    meta_path = index_dir / INDEX_META_FILE
    if not meta_path.is_file():
        report.check(False, "", f"index: no index.json in {index_dir} (build it with `embedpipe merge`)")
        return
    try:
        _check_index_files(index_dir, settings, ids, report)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, pa.ArrowException) as error:
        report.check(False, "", f"index: cannot read the index in {index_dir} ({type(error).__name__}: "
                                f"{one_line(error)}); build it again with `embedpipe merge`")


def _check_index_files(index_dir: Path, settings: dict, ids: pa.ChunkedArray, report: Report) -> None:
    meta = json.loads((index_dir / INDEX_META_FILE).read_text())
    differing = sorted(key for key, value in settings.items()
                       if key not in INDEX_OWNED_KEYS and meta.get(INDEX_NAMES.get(key, key)) != value)
    report.check(not differing, "index: built with job.json's settings",
                 f"index: index.json differs from job.json in {differing}")
    report.check((meta["dimension"], meta["dtype"]) == (settings["dim"], settings["dtype"]),
                 f"index: dimension {meta['dimension']} and dtype {meta['dtype']} as job.json",
                 f"index: dimension {meta['dimension']} and dtype {meta['dtype']} in index.json, "
                 f"{settings['dim']} and {settings['dtype']} in job.json")
    num_vectors = read_faiss_count(index_dir, meta)
    index_ids = pq.read_table(index_dir / INDEX_IDS_FILE).column(0)
    counts = (meta["num_rows"], num_vectors, len(index_ids))
    report.check(counts == (len(ids),) * 3, f"index: {len(ids):,} rows, as the embeddings",
                 f"index: {len(ids):,} embeddings but index.json, index.faiss and index_ids.parquet "
                 f"hold {counts[0]:,}, {counts[1]:,} and {counts[2]:,} rows")
    same_ids = len(index_ids) == len(ids) and index_ids.equals(ids.cast(index_ids.type))
    report.check(same_ids, "index: index_ids.parquet lists the embeddings' ids in FAISS order",
                 "index: index_ids.parquet does not list the embeddings' ids in order; rebuild the index")


def read_faiss_count(index_dir: Path, meta: dict) -> int:
    import faiss

    path = index_dir / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {INDEX_FILE}")
    read = faiss.read_index_binary if meta["metric"] == "hamming" else faiss.read_index
    return read(str(path)).ntotal
