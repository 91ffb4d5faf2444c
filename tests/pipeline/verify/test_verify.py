"""`embedpipe verify`: exit code 0 on a good output; each kind of damage fails its check with exit code 1."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.corpus import variant_texts, write_corpus
from embedpipe.cli.main import app
from embedpipe.pipeline.output.lock import output_lock
from embedpipe.pipeline.output.manifest import completed_units


def verify(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


@pytest.fixture(scope="module")
def good(tmp_path_factory, tiny_model):
    """(input folder, output folder): 60 rows, one of them rejected (empty), in 6 units."""
    folder = tmp_path_factory.mktemp("verify")
    texts = variant_texts(60)
    texts[13] = ""
    write_corpus(folder / "in", texts, num_files=3, row_group_size=10)
    result = CliRunner().invoke(app, ["index", str(folder / "in"), "--output", str(folder / "out"), "--model",
                                      str(tiny_model), "--device", "cpu", "--quiet", "--rows-per-unit", "10"])
    assert result.exit_code == 0, result.output
    return folder / "in", folder / "out"


def test_a_good_output_passes(good):
    inputs, output = good
    result = verify(output, "--input", inputs)
    assert result.exit_code == 0, result.output
    assert "ok    input: each of the 60 input rows is in the output or rejected, once" in result.stdout
    assert "FAIL" not in result.stdout and "warn" not in result.stdout


def a_unit(output):
    record = sorted(completed_units(output).values(), key=lambda r: r["unit_id"])[1]
    return output / "manifest", output / "embeddings" / record["file_name"], record


def rewrite_unit(output, change):
    """Applies change(table) -> table to a unit's file and records its new row count."""
    manifest, path, record = a_unit(output)
    table = change(pq.read_table(path))
    pq.write_table(table, path)
    record_path = next(p for p in manifest.glob("*.json") if json.loads(p.read_text())["unit_id"] == record["unit_id"])
    record_path.write_text(json.dumps({**record, "num_rows": table.num_rows}))


def set_vector(value):
    def change(table):
        vectors = table.column("embedding").combine_chunks()
        values = vectors.flatten().to_numpy().copy()
        values[:vectors.type.list_size] = value  # the first row's
        return table.set_column(1, "embedding", pa.FixedSizeListArray.from_arrays(pa.array(values), type=vectors.type))
    return change


def edit_json(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


DAMAGE = {
    "a unit not done": (lambda out: next((out / "manifest").glob("part-1*.json")).unlink(),
                        ["units: 1 of the job's 6 units are not done"]),
    "a NaN vector": (lambda out: rewrite_unit(out, set_vector(np.nan)), ["vectors: 1 NaN or all-zero vectors"]),
    "a zero vector": (lambda out: rewrite_unit(out, set_vector(0.0)), ["vectors: 1 NaN or all-zero vectors"]),
    "a row lost": (lambda out: rewrite_unit(out, lambda t: t.slice(1)),
                   ["index: 58 embeddings but index.json, index.faiss and index_ids.parquet hold 59",
                    "input: 1 ids are missing from the output (and not rejected)"]),
    "a row doubled": (lambda out: rewrite_unit(out, lambda t: pa.concat_tables([t, t.slice(0, 1)])),
                      ["input: 1 ids are in the output more often than in the input"]),
    "a file unlike its record": (lambda out: edit_json(next((out / "manifest").glob("part-0*.json")), num_rows=3),
                                 ["files: 1 files differ from their records"]),
    "another dimension in index.json": (lambda out: edit_json(out / "index.json", dimension=32),
                                        ["index: dimension 32 and dtype float32 in index.json, 64 and float32"]),
    "index ids out of order": (lambda out: pq.write_table(pq.read_table(out / "index_ids.parquet")[::-1],
                                                          out / "index_ids.parquet"),
                               ["index: index_ids.parquet does not list the embeddings' ids in order"]),
    "no index": (lambda out: (out / "index.json").unlink(), ["index: no index.json in"]),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_fails_its_check(good, tmp_path, damage):
    inputs, output = good
    damaged = tmp_path / "out"
    shutil.copytree(output, damaged)
    harm, messages = DAMAGE[damage]
    harm(damaged)
    result = verify(damaged, "--input", inputs)
    assert result.exit_code == 1, result.output
    for message in messages:
        assert f"FAIL  {message}" in result.stdout
    assert "checks failed" in result.stderr


def test_not_an_output_and_a_running_job(good, tmp_path):
    inputs, output = good
    result = verify(inputs)
    assert result.exit_code == 2 and "is not an embedpipe output folder" in result.stderr
    with output_lock(output):  # what a running index job holds
        result = verify(output)
    assert result.exit_code == 4 and "is being written by another run (pid" in result.stderr


@pytest.mark.parametrize("damage, message", [
    ("truncate-unit", "unit files cannot be read"),
    ("remove-faiss", "no index.faiss"),
    ("corrupt-index-json", "cannot read the index"),
])
def test_damaged_outputs_fail_naming_what_not_crash(good, tmp_path, damage, message):
    """verify prints FAIL for every damaged output (it crashed with ArrowInvalid / FileNotFoundError / a
    JSON error), exit 1."""
    inputs, output = good
    damaged = tmp_path / "out"
    shutil.copytree(output, damaged)
    if damage == "truncate-unit":
        _, path, _ = a_unit(damaged)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "remove-faiss":
        (damaged / "index.faiss").unlink()
    else:
        (damaged / "index.json").write_text('{"factory": "Flat", "num_rows": ')
    result = verify(damaged)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and message in result.stdout


def test_a_valid_job_of_zero_rows_passes(tmp_path, tiny_model):
    """Inputs with zero rows make a valid, empty output (verify crashed: a cast from string to null)."""
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())}),
                   tmp_path / "in" / "empty.parquet")
    result = CliRunner().invoke(app, ["index", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--model",
                                      str(tiny_model), "--device", "cpu", "--quiet"])
    assert result.exit_code == 0, result.output
    checked = verify(tmp_path / "out", "--input", tmp_path / "in")
    assert checked.exit_code == 0, checked.output
