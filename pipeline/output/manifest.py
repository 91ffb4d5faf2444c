"""Per-unit completion records and the job-settings guard of an output folder."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from embedpipe.pipeline.output.layout import (EMBEDDINGS_FOLDER, INDEX_FILE_NAMES, MANIFEST_FOLDER, OUTPUT_FOLDERS,
                                              REJECTED_FOLDER, SETTINGS_FILE, manifest_record, unit_file)
from embedpipe.pipeline.output.sinks import commit_file, temporary_path, writing
from embedpipe.pipeline.inputs.sources import WorkUnit

from embedpipe.pipeline.errors import UserError, one_line


class SettingsMismatch(UserError):
    """The output folder was written with other job settings."""


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes JSON through a temporary file renamed into place."""
    temporary = temporary_path(path)
    try:
        with writing(path):
            temporary.write_text(json.dumps(data, indent=2, sort_keys=True))
            commit_file(temporary, path)
    except BaseException:  # a full disk, an interrupt: no temporary is left behind
        temporary.unlink(missing_ok=True)
        raise


def mark_done(output_dir: str | Path, unit: WorkUnit, num_rows: int, num_rejected: int,
              file_name: str) -> None:
    """Records `unit` as complete; call after its file (name within embeddings/) is in place."""
    record = {"unit_id": unit.unit_id, "path": unit.path, "format": unit.format,
              "start": unit.start, "stop": unit.stop, "num_rows": num_rows,
              "num_rejected": num_rejected, "file_name": file_name, "finished_at": time.time(),
              "input": None if unit.fingerprint is None else list(unit.fingerprint)}
    write_json_atomic(manifest_record(output_dir, unit.unit_id), record)


def completed_units(output_dir: str | Path, folder: str = EMBEDDINGS_FOLDER) -> dict[str, dict]:
    """unit_id -> completion record, for units whose file exists in OUTPUT/folder (a tokenize job's: tokens)."""
    output_dir = Path(output_dir)
    done = {}
    for record_path in sorted((output_dir / MANIFEST_FOLDER).glob("[!.]*.json")):
        try:
            record = json.loads(record_path.read_text())
        except (OSError, json.JSONDecodeError):  # unreadable: the unit is simply redone
            continue
        if (output_dir / folder / record["file_name"]).is_file():
            done[record["unit_id"]] = record
    return done


def input_changed(record: dict, unit: WorkUnit) -> bool:
    """Whether the unit's input differs from the one its completion record was embedded from. A record of a
    version before fingerprints, or a unit without one, counts as unchanged: nothing to tell them apart."""
    stored = record.get("input")
    return bool(stored) and unit.fingerprint is not None and tuple(stored) != unit.fingerprint


def rename_unit(output_dir: str | Path, record: dict, unit: WorkUnit) -> dict:
    """Records a done unit under the name `unit` has now (same file, same rows: an output of an earlier
    version, which named units otherwise); returns the new record."""
    renamed = {**record, "unit_id": unit.unit_id}
    write_json_atomic(manifest_record(output_dir, unit.unit_id), renamed)
    manifest_record(output_dir, record["unit_id"]).unlink(missing_ok=True)
    return renamed


def drop_units(output_dir: str | Path, records: list[dict], folder: str = EMBEDDINGS_FOLDER) -> None:
    """Forgets completed units: their record first (no record outlives its file), then their file and
    their rejected rows."""
    output_dir = Path(output_dir)
    for record in records:
        manifest_record(output_dir, record["unit_id"]).unlink(missing_ok=True)
        (output_dir / folder / record["file_name"]).unlink(missing_ok=True)
        unit_file(output_dir, REJECTED_FOLDER, record["unit_id"]).unlink(missing_ok=True)


def check_or_write_settings(output_dir: str | Path, settings: dict, overwrite: bool = False) -> bool:
    """check_settings, then store_settings; returns whether earlier results were cleared."""
    clear = check_settings(output_dir, settings, overwrite)
    store_settings(output_dir, settings, clear)
    return clear


def check_settings(output_dir: str | Path, settings: dict, overwrite: bool = False) -> bool:
    """Guards an output folder against mixing jobs with different settings, writing nothing: raises
    SettingsMismatch when OUTPUT/job.json holds other settings, unless `overwrite`. Returns whether the
    job starts afresh over earlier results (`overwrite` always discards them, whatever the settings);
    identical settings without it keep everything in place (a resume)."""
    settings_path = Path(output_dir) / SETTINGS_FILE
    new = json.loads(json.dumps(settings))  # compare as stored: tuples become lists, etc.
    old = json.loads(settings_path.read_text()) if settings_path.exists() else None
    if old is not None and old != new and not overwrite:
        raise SettingsMismatch(_mismatch_message(settings_path, old, new))
    return overwrite and old is not None


def store_settings(output_dir: str | Path, settings: dict, clear: bool) -> None:
    """Writes OUTPUT/job.json, after clearing the earlier results when `clear` (check_settings said so)."""
    output_dir = Path(output_dir)
    if clear:
        clear_outputs(output_dir)
    write_json_atomic(output_dir / SETTINGS_FILE, json.loads(json.dumps(settings)))


def clear_outputs(output_dir: Path) -> None:
    """Removes all results of a job (records first, so no record outlives its file)."""
    for folder in OUTPUT_FOLDERS:
        shutil.rmtree(output_dir / folder, ignore_errors=True)
    for name in INDEX_FILE_NAMES:
        (output_dir / name).unlink(missing_ok=True)


def _mismatch_message(settings_path: Path, old: dict, new: dict) -> str:
    missing = "<not set>"
    pairs = {key: (old.get(key, missing), new.get(key, missing)) for key in sorted(old.keys() | new.keys())}
    differing = [f"  {key}: {stored!r} (stored) != {now!r} (now)"
                 for key, (stored, now) in pairs.items() if stored != now]
    return (f"{settings_path} was written with other settings:\n" + "\n".join(differing)
            + "\nUse a new output folder, or overwrite to discard the existing results.")


def completed_columns(output: Path, folder: str = EMBEDDINGS_FOLDER) -> pa.Schema | None:
    """The id and kept columns of the output's first readable completed unit with rows (None: none yet).

    A unit file holds the id, the embedding (or, from `tokenize`, the token ids), then the kept columns."""
    for record in completed_units(output, folder).values():
        if record["num_rows"]:
            try:
                return pq.read_schema(output / folder / record["file_name"]).remove(1)
            except (OSError, pa.ArrowException):  # damaged: damaged_units names it, and its unit is redone
                continue
    return None


def damaged_units(output: Path, records: list[dict], folder: str = EMBEDDINGS_FOLDER) -> dict[str, str]:
    """unit_id -> what is wrong, for completed units whose file cannot be read or holds another number of
    rows than its record (truncated, overwritten, or corrupted on disk). Reads each file's footer only."""
    damaged = {}
    for record in records:
        path = output / folder / record["file_name"]
        try:
            rows = pq.read_metadata(path).num_rows
        except (OSError, pa.ArrowException) as error:
            damaged[record["unit_id"]] = f"{path} cannot be read ({one_line(error)})"
            continue
        if rows != record["num_rows"]:
            damaged[record["unit_id"]] = f"{path} holds {rows} rows, its record {record['num_rows']}"
    return damaged
