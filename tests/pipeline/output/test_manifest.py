from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from embedpipe.pipeline.output.manifest import (SettingsMismatch, check_or_write_settings, check_settings,
                                                completed_units, mark_done)
from embedpipe.pipeline.output.sinks import UnitWriter
from embedpipe.pipeline.inputs.sources import WorkUnit


def finish_unit(output_dir, unit_id, num_rows=2):
    unit = WorkUnit(unit_id, "/data/a.parquet", "parquet", 0, 1, "a.parquet")
    with UnitWriter(output_dir, unit_id, 2, "float32", pa.field("id", pa.int64())) as writer:
        writer.write(pa.array(range(num_rows), pa.int64()), np.zeros((num_rows, 2), np.float32))
    mark_done(output_dir, unit, num_rows, 1, writer.path.name)
    return writer.path


def test_done_records_are_listed(tmp_path):
    finish_unit(tmp_path, "a.parquet#rg0-1")
    finish_unit(tmp_path, "a.parquet#rg1-2", num_rows=5)
    done = completed_units(tmp_path)
    assert sorted(done) == ["a.parquet#rg0-1", "a.parquet#rg1-2"]
    assert done["a.parquet#rg1-2"]["num_rows"] == 5
    assert done["a.parquet#rg1-2"]["num_rejected"] == 1
    assert not [p for p in (tmp_path / "manifest").iterdir() if p.name.startswith(".")]


def test_record_without_its_parquet_is_not_done(tmp_path):
    finish_unit(tmp_path, "kept")
    finish_unit(tmp_path, "lost").unlink()
    assert list(completed_units(tmp_path)) == ["kept"]
    assert completed_units(tmp_path / "nothing") == {}


def test_first_run_writes_settings_and_same_settings_resume(tmp_path):
    settings = {"model": "m1", "dim": 384, "prompt": ""}
    assert check_or_write_settings(tmp_path, settings, overwrite=False) is False
    assert json.loads((tmp_path / "job.json").read_text()) == settings
    finish_unit(tmp_path, "u")
    assert check_or_write_settings(tmp_path, dict(settings), overwrite=False) is False
    assert list(completed_units(tmp_path)) == ["u"]


def test_overwrite_starts_afresh_even_with_the_same_settings(tmp_path):
    """--overwrite discards every earlier result: with unchanged settings it kept them, and verify then
    failed on the stale ones."""
    settings = {"model": "m1", "dim": 384}
    check_or_write_settings(tmp_path, settings)
    finish_unit(tmp_path, "u")
    assert check_settings(tmp_path, settings, overwrite=True) is True
    assert list(completed_units(tmp_path)) == ["u"]  # check_settings writes nothing
    assert check_or_write_settings(tmp_path, dict(settings), overwrite=True) is True
    assert completed_units(tmp_path) == {}
    assert json.loads((tmp_path / "job.json").read_text()) == settings


def test_mismatch_lists_each_differing_key(tmp_path):
    check_or_write_settings(tmp_path, {"model": "m1", "dim": 384, "dtype": "float32"}, overwrite=False)
    with pytest.raises(SettingsMismatch) as error:
        new_settings = {"model": "m2", "dim": 384, "normalize": True}
        check_or_write_settings(tmp_path, new_settings, overwrite=False)
    message = str(error.value)
    assert "model: 'm1' (stored) != 'm2' (now)" in message
    assert "dtype: 'float32'" in message and "normalize:" in message
    assert "dim" not in message


def test_overwrite_clears_previous_results(tmp_path):
    check_or_write_settings(tmp_path, {"model": "m1"}, overwrite=False)
    finish_unit(tmp_path, "u")
    (tmp_path / "rejected").mkdir()
    (tmp_path / "rejected" / "u.parquet").write_bytes(b"x")
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "index.faiss").write_bytes(b"x")
    assert check_or_write_settings(tmp_path, {"model": "m2"}, overwrite=True) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]
    assert json.loads((tmp_path / "job.json").read_text()) == {"model": "m2"}
