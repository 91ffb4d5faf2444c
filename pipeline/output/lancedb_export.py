"""`embedpipe export OUTPUT lancedb://DIR[#TABLE]`: an index job's embeddings as a LanceDB table.

Each row: the id, `vector` (float32; float16 and int8 jobs are widened to float32, the types LanceDB
searches), the kept columns, and `embedpipe_unit` (UNIT_ID@FINISHED_AT, the unit that wrote it).
Resumable by the manifest's rules: a run adds the done units the table lacks, one commit each (a
LanceDB add is atomic, so a killed export leaves whole units), and deletes the rows of units that
were redone or dropped since. A sidecar file, DIR/.embedpipe-TABLE.json, ties the table to its
OUTPUT: another job's output is refused rather than mixed in.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.output.layout import EMBEDDINGS_FOLDER
from embedpipe.pipeline.output.manifest import completed_units, write_json_atomic
from embedpipe.pipeline.output.job_files import read_settings

SCHEME = "lancedb://"
DEFAULT_TABLE = "embeddings"
UNIT_COLUMN = "embedpipe_unit"


class ExportError(UserError, ValueError):
    """A destination or an output that cannot be exported (exit 2)."""


@dataclass(frozen=True)
class ExportResult:
    table: str
    added_units: int
    added_rows: int
    removed_units: int
    rows: int  # in the table now


def parse_destination(destination: str) -> tuple[Path, str]:
    """lancedb://DIR[#TABLE] -> (DIR, TABLE)."""
    if not destination.startswith(SCHEME) or len(destination) == len(SCHEME):
        raise ExportError(f"destination {destination!r}: give lancedb://DIR or lancedb://DIR#TABLE")
    folder, _, table = destination[len(SCHEME):].partition("#")
    return Path(folder).expanduser(), table or DEFAULT_TABLE


def export_to_lancedb(output: Path, destination: str, ann_index: bool = False) -> ExportResult:
    """Adds OUTPUT's done units that the table lacks, removes those redone or dropped since; see the module."""
    import lancedb

    folder, name = parse_destination(destination)
    settings = read_settings(output)
    dtype = output_dtype(settings["dtype"])
    if dtype.packed_bits:
        raise ExportError(f"{output} holds binary embeddings; export a float32, float16 or int8 job to LanceDB")
    _claim(folder, name, output, settings)
    db = lancedb.connect(str(folder))
    table = _open_table(db, name)
    done = {f"{unit_id}@{record.get('finished_at')}": record for unit_id, record in completed_units(output).items()}
    present = set() if table is None else \
        set(table.search().select([UNIT_COLUMN]).limit(None).to_arrow().column(UNIT_COLUMN).unique().to_pylist())
    stale = sorted(present - done.keys())
    if table is not None and stale:
        table.delete(f"{UNIT_COLUMN} IN ({', '.join(_sql_string(unit) for unit in stale)})")
    added_rows = added_units = 0
    for unit, record in sorted(done.items()):
        if unit in present or not record["num_rows"]:
            continue
        rows = _unit_rows(output / EMBEDDINGS_FOLDER / record["file_name"], unit)
        if table is None:
            table = db.create_table(name, rows)
        else:
            table.add(rows)
        added_rows, added_units = added_rows + rows.num_rows, added_units + 1
    if ann_index and table is not None:
        _build_ann_index(table, settings)
    return ExportResult(str(folder / name), added_units, added_rows, len(stale),
                        0 if table is None else table.count_rows())


def _open_table(db, name: str):
    try:
        return db.open_table(name)
    except ValueError:  # "Table 'NAME' was not found": the first export creates it
        return None


def _claim(folder: Path, name: str, output: Path, settings: dict) -> None:
    """Writes (or checks) the sidecar that ties the table to OUTPUT and its settings."""
    sidecar = folder / f".embedpipe-{name}.json"
    mine = {"output": str(output.resolve()), "settings": settings}
    if sidecar.is_file():
        theirs = json.loads(sidecar.read_text())
        if theirs != mine:
            raise ExportError(f"LanceDB table {folder / name} was exported from {theirs.get('output')} with other "
                              "settings or from another output; export into another table (lancedb://DIR#TABLE)")
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(sidecar, mine)


def _unit_rows(path: Path, unit: str) -> pa.Table:
    """A unit file as table rows: id, vector float32 [dim], the kept columns, embedpipe_unit."""
    table = pq.read_table(path)
    embedding = table.column(1).combine_chunks()
    dim = embedding.type.list_size
    values = embedding.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    vector = pa.FixedSizeListArray.from_arrays(pa.array(values), dim)
    columns = {table.column_names[0]: table.column(0), "vector": vector}
    columns |= {name: table.column(name) for name in table.column_names[2:]}
    columns[UNIT_COLUMN] = pa.array([unit] * table.num_rows, pa.string())
    return pa.table(columns)


def _build_ann_index(table, settings: dict) -> None:
    metric = "cosine" if settings.get("normalize") or settings["dtype"] == "int8" else "dot"
    try:
        table.create_index(metric=metric, vector_column_name="vector", replace=True)
    except (ValueError, RuntimeError, OSError) as error:  # e.g. fewer rows than the index's partitions need
        raise ExportError(f"LanceDB could not build its ANN index on {table.count_rows()} rows: "
                          f"{' '.join(str(error).split())[:300]}") from error


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
