"""`embedpipe export OUTPUT lancedb://DIR#TABLE` against a real LanceDB: rows, search equal to FAISS Flat, resume."""
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.corpus import read_embeddings, variant_texts, vectors_of

lancedb = pytest.importorskip("lancedb")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def write_input(folder, name, ids, texts):
    folder.mkdir(exist_ok=True)
    pq.write_table(pa.table({"id": ids, "text": texts, "title": [f"title {i}" for i in ids]}), folder / name,
                   row_group_size=100)


def index(inputs, output, *options):
    result = run_cli("index", inputs, "--output", output, "--device", "cpu", "--rows-per-unit", "100",
                     "--keep-columns", "title", "--quiet", *options)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def job(tmp_path):
    texts = variant_texts(300)
    write_input(tmp_path / "in", "a.parquet", list(range(200)), texts[:200])
    write_input(tmp_path / "in", "b.parquet", list(range(200, 300)), texts[200:])
    index(tmp_path / "in", tmp_path / "out")
    return tmp_path


def table_of(folder, name="docs"):
    return lancedb.connect(str(folder)).open_table(name)


def test_export_writes_every_row_and_searches_as_faiss_flat(job):
    result = run_cli("export", job / "out", f"lancedb://{job / 'lance'}#docs")
    assert result.returncode == 0, result.stderr
    assert "exported 300 rows of 3 units" in result.stderr
    table = table_of(job / "lance")
    rows = table.search().limit(None).to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == list(range(300))
    assert rows.column("title").to_pylist()[5] == "title 5"
    assert rows.schema.field("vector").type == pa.list_(pa.float32(), 384)
    stored = read_embeddings(job / "out")
    np.testing.assert_array_equal(vectors_of(rows.select(["vector"]).rename_columns(["embedding"])), vectors_of(stored))
    import faiss
    flat = faiss.read_index(str(job / "out" / "index.faiss"))
    ids = pq.read_table(job / "out" / "index_ids.parquet").column(0).to_pylist()
    queries = vectors_of(stored)[::15]  # 20 queries
    scores, labels = flat.search(queries, 10)
    for query, faiss_scores, faiss_top in zip(queries, scores, labels):
        hits = table.search(query).metric("cosine").limit(10).to_arrow()
        np.testing.assert_allclose(1 - hits.column("_distance").to_numpy(), faiss_scores, atol=1e-5)
        # the same ids, but for rows of one text (variant_texts repeats 5 of 300), whose order ties break
        distinct = {ids[i] for i, s in zip(faiss_top, faiss_scores) if np.sum(np.abs(faiss_scores - s) < 1e-6) == 1}
        assert distinct <= set(hits.column("id").to_pylist())


def test_export_resumes_adds_redone_units_and_removes_their_old_rows(job):
    destination = f"lancedb://{job / 'lance'}#docs"
    assert run_cli("export", job / "out", destination).returncode == 0
    again = run_cli("export", job / "out", destination)
    assert again.returncode == 0 and "exported 0 rows of 0 units" in again.stderr, again.stderr
    texts = variant_texts(300)
    write_input(job / "in", "b.parquet", list(range(200, 300)), [t.upper() for t in texts[200:]])  # b changed
    index(job / "in", job / "out")
    redone = run_cli("export", job / "out", destination)
    assert redone.returncode == 0 and "exported 100 rows of 1 units" in redone.stderr, redone.stderr
    assert "1 units removed; 300 rows in the table" in redone.stderr
    table = table_of(job / "lance")
    rows = table.search().limit(None).to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == list(range(300))  # nothing doubled
    stored = read_embeddings(job / "out")
    np.testing.assert_array_equal(vectors_of(rows.select(["vector"]).rename_columns(["embedding"])), vectors_of(stored))


def test_another_output_or_a_binary_job_is_refused_in_one_line(job):
    destination = f"lancedb://{job / 'lance'}#docs"
    assert run_cli("export", job / "out", destination).returncode == 0
    index(job / "in", job / "other")
    other = run_cli("export", job / "other", destination)
    assert other.returncode == 2 and "was exported from" in other.stderr and len(other.stderr.splitlines()) == 1
    index(job / "in", job / "bits", "--dtype", "binary")
    bits = run_cli("export", job / "bits", f"lancedb://{job / 'lance'}#bits")
    assert bits.returncode == 2 and "binary embeddings" in bits.stderr
    bad = run_cli("export", job / "out", "qdrant://x")
    assert bad.returncode == 2 and "give lancedb://DIR" in bad.stderr
    assert json.loads((job / "lance" / ".embedpipe-docs.json").read_text())["output"] == str((job / "out").resolve())
