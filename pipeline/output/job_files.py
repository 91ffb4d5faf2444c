"""Job-level files of an output folder: settings, unit list, rejected.parquet, metrics.json and the index
(their names, and the folder's whole layout: output/layout.py).
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable

from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.output.faiss_index import build_index, new_index
from embedpipe.pipeline.output.manifest import completed_units, write_json_atomic
from embedpipe.pipeline.output.layout import (INDEX_FILE_NAMES, INDEX_META_FILE, METRICS_FILE, REJECTED_FILE,
                                              SETTINGS_FILE, UNITS_FILE)
from embedpipe.pipeline.output.sinks import AtomicParquetWriter, read_rejected, remove_unfinished
from embedpipe.pipeline.inputs.sources import WorkUnit

# job.json keys that index.json holds with another meaning: its id_column is the column's name, job.json's the option
INDEX_OWNED_KEYS = ("id_column",)
# job.json keys that index.json holds under its own name (one key per fact): the job's dim is the index's dimension
INDEX_NAMES = {"dim": "dimension"}


class IndexBuildError(UserError, ValueError):
    """The embeddings are complete but the FAISS index could not be built."""


class IncompleteOutputs(UserError, ValueError):
    """`merge` was asked to index outputs that miss some of the job's units."""


def write_unit_list(output_dir: Path, units: list[WorkUnit]) -> None:
    write_json_atomic(output_dir / UNITS_FILE, {"units": [unit.unit_id for unit in units]})


def write_rejected_table(output_dir: Path) -> int:
    """Combines OUTPUT/rejected/*.parquet into OUTPUT/rejected.parquet; returns its row count."""
    table = read_rejected(output_dir)
    with AtomicParquetWriter(output_dir / REJECTED_FILE, table.schema) as file:
        for batch in table.to_batches():
            file.write_batch(batch.columns)
    return table.num_rows


def write_metrics(output_dir: Path, metrics: dict) -> None:
    write_json_atomic(output_dir / METRICS_FILE, metrics)


def read_settings(output_dir: Path) -> dict:
    path = Path(output_dir) / SETTINGS_FILE
    if not path.is_file():
        raise IncompleteOutputs(f"{output_dir} is not an embedpipe output folder (no {SETTINGS_FILE})")
    return json.loads(path.read_text())


def index_outputs(output_dirs: list[Path], index_dir: Path, factory: str, settings: dict,
                  in_memory: dict | None = None) -> dict:
    """Builds the FAISS index of the outputs' completed units into index_dir, unless it is current
    (in_memory: vectors of some unit files, held by the job that wrote them; see build_index)."""
    done = [record for d in output_dirs for record in completed_units(d).values()]
    # one key per fact: the job's `dim` is the index's `dimension` (and `metric` says whether the vectors are
    # normalised at search, "cosine", or were already, "inner_product")
    extra = {**{k: v for k, v in settings.items() if k not in INDEX_NAMES}, "num_units": len(done),
             "units_digest": units_digest(done)}
    num_rows = sum(record["num_rows"] for record in done)
    meta = built_index_meta(Path(index_dir))
    if meta is not None and meta.get("factory") == factory and meta.get("num_rows") == num_rows and \
            all(meta.get(key) == value for key, value in extra.items() if key not in INDEX_OWNED_KEYS):
        return meta  # already built from these units with these settings
    normalized = bool(settings["normalize"]) and output_dtype(settings["dtype"]).is_float
    try:
        return build_index(list(output_dirs), Path(index_dir), factory, normalized, extra_meta=extra,
                           in_memory=in_memory)
    except ValueError as error:
        raise IndexBuildError(f"{error}. The embeddings are complete; build the index again with "
                              f"`embedpipe merge {' '.join(map(str, output_dirs))} --index-factory ...`") from error


def built_index_meta(index_dir: Path) -> dict | None:
    """index.json of the index built in index_dir; None when it, index.faiss or index_ids.parquet is missing, or
    index.json cannot be read (then the index is built again)."""
    if not all((index_dir / name).is_file() for name in INDEX_FILE_NAMES):
        return None
    try:
        meta = json.loads((index_dir / INDEX_META_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


def units_digest(records: list[dict]) -> str:
    """Names the set of unit files an index holds: a unit redone (its input changed) changes it, even when
    the row count stays (an edited row), so the index is rebuilt."""
    keys = sorted((r["unit_id"], r["file_name"], r["num_rows"], r.get("finished_at")) for r in records)
    return hashlib.sha1(json.dumps(keys).encode()).hexdigest()[:16]


def check_index_factory(factory: str, width: int, binary: bool,
                        num_rows: Callable[[], int | None] = lambda: None) -> None:
    """Fails at once, before hours of embedding, on a factory string FAISS rejects, or on an IVF index with
    more clusters than rows to train them (num_rows(): the inputs' rows, None when unknown; asked for IVF
    factories only, as counting JSONL lines reads the files)."""
    try:
        new_index(factory, width, binary)
    except ValueError as error:
        raise IndexBuildError(str(error)) from error
    clusters = re.search(r"IVF(\d+)", factory)
    rows = num_rows() if clusters else None
    if rows is not None and rows < int(clusters.group(1)):
        raise IndexBuildError(f"--index-factory {factory} trains {int(clusters.group(1)):,} clusters, but the inputs "
                              f"have {rows:,} rows; FAISS needs at least one per cluster (about 39 per cluster "
                              f"train well): use fewer clusters, or Flat")


def merge_outputs(output_dirs: list[Path], index_dir: Path, factory: str | None = None,
                  allow_incomplete: bool = False) -> dict:
    """Indexes several (shard) outputs of one job together; they must share settings and cover the job.
    factory None: the job's dtype's (output_dtypes.default_index_factory)."""
    settings = read_settings(output_dirs[0])
    factory = factory or output_dtype(settings["dtype"]).default_index_factory
    for other in output_dirs[1:]:
        if read_settings(other) != settings:
            raise IncompleteOutputs(f"{other} was written with other settings than {output_dirs[0]} "
                                    f"(compare their {SETTINGS_FILE}); only outputs of one job can be merged")
    if not allow_incomplete:
        _check_complete(output_dirs)
    Path(index_dir).mkdir(parents=True, exist_ok=True)
    for name in INDEX_FILE_NAMES:  # a killed merge's (the caller holds index_dir's lock: nobody else writes them)
        remove_unfinished(Path(index_dir), name)
    return index_outputs(output_dirs, index_dir, factory, settings)


def _check_complete(output_dirs: list[Path]) -> None:
    listed: set[str] = set()
    for output_dir in output_dirs:
        path = Path(output_dir) / UNITS_FILE
        if path.is_file():
            listed.update(json.loads(path.read_text())["units"])
    done = {unit_id for d in output_dirs for unit_id in completed_units(d)}
    missing = sorted(listed - done)
    if missing:
        raise IncompleteOutputs(f"{len(missing)} of the job's {len(listed)} units are not done in these outputs "
                                f"(first: {missing[0]!r}); run the missing shards, or pass --allow-incomplete")
