"""verify's input check: each input row's id is in the output or rejected.parquet as often as in the input."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from embedpipe.pipeline.output.layout import UNITS_FILE
from embedpipe.pipeline.output.sinks import read_rejected
from embedpipe.pipeline.inputs.sources import ColumnSpec, WorkUnit, list_units, read_unit
from embedpipe.pipeline.output.manifest import completed_units, input_changed
from embedpipe.pipeline.verify.report import Report

READ_ROWS = 65536


def check_input(inputs: list[str], settings: dict, ids: pa.ChunkedArray, output_dirs: list[Path],
                report: Report) -> None:
    """Compares id counts (as strings: CSV ids are strings, other inputs' may not be) of the input and the output."""
    units = input_units(inputs, settings, output_dirs, report)
    columns = ColumnSpec(settings["text_column"], settings["id_column"], token_ids=settings.get("token_ids_column"))
    wanted = [batch.column(0) for unit in units for batch in read_unit(unit, columns, READ_ROWS)]
    found = [*ids.chunks, *(chunk for d in output_dirs for chunk in read_rejected(d).column("id").chunks)]
    counts = id_counts(wanted).join(id_counts(found), "id", join_type="full outer",
                                    left_suffix="_input", right_suffix="_output")
    num_in = counts.column("count_input").fill_null(0).to_numpy()
    num_out = counts.column("count_output").fill_null(0).to_numpy()
    problems = []
    for differs, what in ((num_in > num_out, "missing from the output (and not rejected)"),
                          (num_out > num_in, "in the output more often than in the input")):
        if differs.any():
            row = int(differs.argmax())
            problems.append(f"{differs.sum():,} ids are {what} (first: id {counts.column('id')[row].as_py()!r}, "
                            f"{num_in[row]} in the input, {num_out[row]} in the output or rejected)")
    report.check(not problems, f"input: each of the {int(num_in.sum()):,} input rows is in the output or "
                 "rejected, once", "input: " + "; ".join(problems))


def input_units(inputs: list[str], settings: dict, output_dirs: list[Path], report: Report) -> list[WorkUnit]:
    """The units the inputs make, warning when they are not the job's and checking their fingerprints."""
    units = list_units(list(inputs), settings["rows_per_unit"])
    listed = set().union(*(json.loads((d / UNITS_FILE).read_text())["units"] for d in output_dirs
                           if (d / UNITS_FILE).is_file()))
    if {unit.unit_id for unit in units} != listed:
        report.warn("the inputs make other units than the job's units.json: are they the inputs given to index?")
    check_fingerprints(units, output_dirs, report)
    return units


def check_fingerprints(units: list[WorkUnit], output_dirs: list[Path], report: Report) -> None:
    """Each done unit's input is the file it was embedded from (size and mtime as recorded)."""
    done = {unit_id: record for d in output_dirs for unit_id, record in completed_units(d).items()}
    changed = [unit for unit in units if unit.unit_id in done and input_changed(done[unit.unit_id], unit)]
    report.check(not changed, "input: every embedded unit's input is as it was when embedded",
                 f"input: {len(changed)} units' inputs changed since they were embedded "
                 f"(first: {changed[0].unit_id!r}, {changed[0].path}); run the same index command again to redo them"
                 if changed else "")


def id_counts(chunks: list) -> pa.Table:
    """Columns id (large_string) and count: how often each id occurs in the chunks."""
    ids = pa.chunked_array([chunk.cast(pa.large_string()) for chunk in chunks], type=pa.large_string())
    table = pa.table({"id": ids}).group_by("id").aggregate([("id", "count")])
    return table.rename_columns({"id_count": "count"})
