"""verify's input check for a --chunk-tokens job: each input row has its windows in the output exactly once.

No tokenizer is needed: per unit, in order, the windows of each good input row are chunks 0..k-1 of its
id, once each; the first starts at character 0 and the last ends at len(text); each starts after the
one before it started and no later than it ended (chunking.window_spans makes them so). Bad rows are
in rejected.parquet instead.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from embedpipe.pipeline.inputs.sources import ColumnSpec, WorkUnit, bad_text_reasons, read_unit
from embedpipe.pipeline.output.layout import CHUNK_COLUMN, EMBEDDINGS_FOLDER, WINDOW_COLUMNS
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.output.sinks import read_rejected
from embedpipe.pipeline.verify.inputs import READ_ROWS, input_units
from embedpipe.pipeline.verify.report import Report


def first_window_ids(files: list[Path], ids: pa.ChunkedArray) -> pa.Array:
    """The ids of the unit files' first windows (one per embedded input row); ids: all rows' ids, in file order."""
    chunks = [pq.read_table(path, columns=[CHUNK_COLUMN]).column(0).combine_chunks() for path in files]
    is_first = pc.equal(pa.chunked_array(chunks, pa.int32()).combine_chunks(), 0)
    return ids.combine_chunks().filter(is_first)


def check_windows(inputs: list[str], settings: dict, output_dirs: list[Path], report: Report) -> None:
    """Each input row's windows are in the output once (or it is rejected); one line naming the first unit that
    differs."""
    units = input_units(inputs, settings, output_dirs, report)
    done = {unit_id: d / EMBEDDINGS_FOLDER / record["file_name"]
            for d in output_dirs for unit_id, record in completed_units(d).items()}
    rejected = pa.concat_tables([read_rejected(d).select(["unit_id", "id"]).cast(
        pa.schema([("unit_id", pa.string()), ("id", pa.large_string())])) for d in output_dirs])
    columns = ColumnSpec(settings["text_column"], settings["id_column"])
    num_rows, problems = 0, []
    for unit in units:
        ids, lengths, good = unit_rows(unit, columns)
        num_rows += len(ids)
        problem = rejected_problem(unit, ids[~good], rejected) or (
            f"none of its {int(good.sum()):,} embeddable rows has windows: the unit is not done"
            if unit.unit_id not in done else window_problem(ids[good], lengths[good], done[unit.unit_id]))
        if problem:
            problems.append(f"unit {unit.unit_id!r}: {problem}")
    report.check(not problems, f"input: each of the {num_rows:,} input rows has its windows in the output once, "
                               "covering its text, or is rejected",
                 f"input: {len(problems):,} units' rows differ from their windows (first: {problems[:1]})")


def unit_rows(unit: WorkUnit, columns: ColumnSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A unit's input rows: ids (as strings), text lengths in characters (str indices), and whether each is
    embedded (not rejected). [rows] each."""
    ids, lengths, good = [], [], []
    for batch in read_unit(unit, columns, READ_ROWS):
        ids += batch.column(0).cast(pa.large_string()).to_pylist()
        lengths.append(pc.utf8_length(batch.column(1)).fill_null(0).to_numpy(zero_copy_only=False))
        good.append(bad_text_reasons(batch.column(1)) == "")
    return (np.array(ids, dtype=object), np.concatenate(lengths).astype(np.int64),
            np.concatenate(good).astype(np.bool_))


def rejected_problem(unit: WorkUnit, bad_ids: np.ndarray, rejected: pa.Table) -> str | None:
    """Whether the unit's rejected rows are its bad rows, in order."""
    mine = rejected.filter(pc.equal(rejected.column("unit_id"), unit.unit_id)).column("id").to_pylist()
    if mine == bad_ids.tolist():
        return None
    return f"{len(bad_ids):,} rows of null, empty or whitespace text, {len(mine):,} rejected"


def window_problem(ids: np.ndarray, lengths: np.ndarray, path: Path) -> str | None:
    """What is wrong with a unit file's windows of its embeddable rows (ids, text lengths [rows], in order)."""
    file = pq.ParquetFile(path)
    table = file.read(columns=[file.schema_arrow.names[0], *WINDOW_COLUMNS])
    window_ids = np.array(table.column(0).cast(pa.large_string()).to_pylist(), dtype=object)
    chunk, start, end = (table.column(name).to_numpy() for name in WINDOW_COLUMNS)
    if len(chunk) and chunk[0] != 0:
        return f"the row with id {window_ids[0]!r}: its first window in the file is not chunk 0"
    is_first = chunk == 0
    if list(window_ids[is_first]) != list(ids):
        differ = next((i for i, (a, b) in enumerate(zip(window_ids[is_first], ids)) if a != b), None)
        at = f"from id {ids[differ]!r} on" if differ is not None else f"after {min(len(ids), is_first.sum()):,} rows"
        return f"{len(ids):,} rows but the first windows of {int(is_first.sum()):,}, {at}"
    if not len(chunk):
        return None
    for bad, what in _window_faults(window_ids, chunk, start, end, lengths):
        if bad.any():
            return f"the row with id {window_ids[int(np.argmax(bad))]!r}: {what}"
    return None


def _window_faults(window_ids: np.ndarray, chunk: np.ndarray, start: np.ndarray, end: np.ndarray,
                   lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """[W] bool per kind of fault, and its description, for windows whose first windows match their rows
    (lengths: the rows' text lengths, one per first window)."""
    is_first = chunk == 0
    follows = ~is_first[1:]  # window i + 1 continues the row of window i
    is_last = np.append(is_first[1:], True)
    ends_short = np.zeros(len(chunk), np.bool_)
    ends_short[np.flatnonzero(is_last)] = end[is_last] != lengths
    return [(is_first & (start != 0), "its first window does not start at character 0"),
            (np.append(False, follows & ((chunk[1:] != chunk[:-1] + 1) | (window_ids[1:] != window_ids[:-1]))),
             "a window is missing or repeated (its chunks are not 0, 1, 2, ... once each)"),
            (np.append(False, follows & ((start[1:] <= start[:-1]) | (start[1:] > end[:-1]))),
             "a window leaves a gap after the one before it, or starts no later than it"),
            (ends_short, "its last window does not end at the text's end")]
