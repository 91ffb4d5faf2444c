"""Re-runs that notice changed, rewritten and deleted inputs (each unit's record keeps its input's
fingerprint), through the CLI in this process: the stale vector goes, the changed rows come in once."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from embedpipe.cli.main import app
from embedpipe.pipeline.output.faiss_index import SearchIndex
from support.corpus import read_embeddings, variant_texts

RUN = ["--device", "cpu", "--workers", "0"]


def invoke(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def index(inputs, output, *args):
    return invoke("index", inputs, "--output", output, *RUN, *args)


def write_parquet(path, ids, texts, row_group_size=10):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": ids, "text": texts}), path, row_group_size=row_group_size)


def vector_of(output, row_id) -> np.ndarray:
    table = read_embeddings(output)
    (position,) = np.flatnonzero(np.array(table.column("id").to_pylist()) == row_id)
    return np.asarray(table.column("embedding")[int(position)].as_py(), dtype=np.float32)


def embedding_of(text) -> np.ndarray:
    result = invoke("embed", text, "--device", "cpu")
    return np.asarray(json.loads(result.stdout)["embedding"], dtype=np.float32)


def test_an_edited_row_is_embedded_again_and_verify_flags_it_before(tmp_path):
    texts = variant_texts(30)
    write_parquet(tmp_path / "in" / "a.parquet", list(range(30)), texts)
    assert index(tmp_path / "in", tmp_path / "out", "--rows-per-unit", "10").exit_code == 0
    texts[14] = "a sentence written after the first run"
    write_parquet(tmp_path / "in" / "a.parquet", list(range(30)), texts)
    flagged = invoke("verify", tmp_path / "out", "--input", tmp_path / "in")
    assert flagged.exit_code == 1 and "inputs changed since they were embedded" in flagged.stdout
    rerun = index(tmp_path / "in", tmp_path / "out", "--rows-per-unit", "10")
    assert rerun.exit_code == 0, rerun.output
    assert "3 done units were dropped to be redone" in rerun.stderr  # the file changed: its three units
    assert read_embeddings(tmp_path / "out").num_rows == 30
    np.testing.assert_allclose(vector_of(tmp_path / "out", 14), embedding_of(texts[14]), atol=1e-5)
    hits = SearchIndex.load(tmp_path / "out").search(embedding_of(texts[14])[None], 1)
    assert hits[0][0]["id"] == 14 and hits[0][0]["score"] > 0.999  # the index holds the new vector
    assert invoke("verify", tmp_path / "out", "--input", tmp_path / "in").exit_code == 0


def test_rows_appended_to_a_jsonl_file_are_embedded_on_the_next_run(tmp_path):
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"id": i, "text": t}) for i, t in enumerate(variant_texts(80))]
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines[:50]) + "\n")
    assert index(tmp_path / "in", tmp_path / "out").exit_code == 0
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    assert index(tmp_path / "in", tmp_path / "out").exit_code == 0
    assert sorted(read_embeddings(tmp_path / "out").column("id").to_pylist()) == list(range(80))
    assert SearchIndex.load(tmp_path / "out").meta["num_rows"] == 80


def test_a_file_rewritten_with_other_row_groups_is_indexed_once(tmp_path):
    """The unit names (row-group ranges) now mean other rows: the old units go, the new ones come."""
    texts = variant_texts(60)
    write_parquet(tmp_path / "in" / "a.parquet", list(range(60)), texts, row_group_size=10)
    assert index(tmp_path / "in", tmp_path / "out", "--rows-per-unit", "20").exit_code == 0
    write_parquet(tmp_path / "in" / "a.parquet", list(range(60)), texts, row_group_size=15)
    assert index(tmp_path / "in", tmp_path / "out", "--rows-per-unit", "20").exit_code == 0
    assert sorted(read_embeddings(tmp_path / "out").column("id").to_pylist()) == list(range(60))
    assert SearchIndex.load(tmp_path / "out").meta["num_rows"] == 60


def test_a_deleted_input_is_kept_with_a_warning_and_prune_drops_it(tmp_path):
    write_parquet(tmp_path / "in" / "a.parquet", list(range(20)), variant_texts(20))
    write_parquet(tmp_path / "in" / "b.parquet", list(range(100, 120)), variant_texts(20))
    assert index(tmp_path / "in", tmp_path / "out").exit_code == 0
    (tmp_path / "in" / "b.parquet").unlink()
    kept = index(tmp_path / "in", tmp_path / "out")
    assert kept.exit_code == 0 and "no longer among the inputs" in kept.stderr and "--prune drops them" in kept.stderr
    assert read_embeddings(tmp_path / "out").num_rows == 40
    pruned = index(tmp_path / "in", tmp_path / "out", "--prune")
    assert pruned.exit_code == 0 and "dropped (--prune)" in pruned.stderr
    assert sorted(read_embeddings(tmp_path / "out").column("id").to_pylist()) == list(range(20))
    assert SearchIndex.load(tmp_path / "out").meta["num_rows"] == 20


def test_unit_names_sort_in_input_order_and_an_older_outputs_names_are_taken_over(tmp_path):
    """Zero-padded unit names (rg000002 before rg000010); an output whose records use the unpadded names of
    earlier versions is resumed as it is: its units are renamed, not embedded again."""
    from embedpipe.pipeline.output.layout import manifest_record

    write_parquet(tmp_path / "in" / "a.parquet", list(range(120)), variant_texts(120), row_group_size=10)
    assert index(tmp_path / "in", tmp_path / "out", "--rows-per-unit", "10").exit_code == 0
    names = json.loads((tmp_path / "out" / "units.json").read_text())["units"]
    assert names == sorted(names) and names[2] == "a.parquet#rg000002-000003" and len(names) == 12
    for path in sorted((tmp_path / "out" / "manifest").glob("*.json")):  # as an earlier version named them
        record = json.loads(path.read_text())
        record["unit_id"] = f"a.parquet#rg{record['start']}-{record['stop']}"
        path.unlink()
        manifest_record(tmp_path / "out", record["unit_id"]).write_text(json.dumps(record))
    before = read_embeddings(tmp_path / "out")
    rerun = index(tmp_path / "in", tmp_path / "out", "--rows-per-unit", "10")
    assert rerun.exit_code == 0 and "12 already done, 0 to do" in rerun.stderr, rerun.output
    assert read_embeddings(tmp_path / "out").equals(before)
    assert SearchIndex.load(tmp_path / "out").meta["num_rows"] == 120
