"""`embedpipe index`, `merge` and `query` run in this process on small corpora: bad inputs, settings, shards."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from support.corpus import read_embeddings, variant_texts, vectors_of, write_corpus
from embedpipe.cli.main import app
from embedpipe.pipeline.output.faiss_index import SearchIndex
from embedpipe.pipeline.output.manifest import completed_units

FAST = ["--device", "cpu", "--workers", "0", "--quiet"]


def invoke(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def index(*args):
    return invoke("index", *args, *FAST)


def write_table(path, **columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=10)
    return path


@pytest.fixture
def good_file(tmp_path):
    """in/a.parquet: 20 good rows, ids 0..19; sorts before the files the tests add."""
    return write_table(tmp_path / "in" / "a.parquet", id=list(range(20)), text=variant_texts(20))


def assert_kept(output, num_rows=20):
    """The good file's units are still recorded as done, with their rows."""
    done = completed_units(output)
    assert done and all(unit_id.startswith("a.parquet") for unit_id in done)
    assert read_embeddings(output).num_rows == num_rows


def test_bad_texts_are_skipped_and_recorded(tmp_path):
    texts = ["fine", None, "also fine", "", "ok", " \t\n", "last"]
    write_table(tmp_path / "in" / "t.parquet", id=[f"d{i}" for i in range(7)], text=texts)
    result = index(tmp_path / "in", "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    rejected = pq.read_table(tmp_path / "out" / "rejected.parquet").sort_by("id").to_pydict()
    assert rejected["id"] == ["d1", "d3", "d5"] and rejected["reason"] == ["null", "empty", "whitespace"]
    assert read_embeddings(tmp_path / "out").column("id").to_pylist() == ["d0", "d2", "d4", "d6"]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["rows"], metrics["rejected_rows"], metrics["index"]["num_rows"]) == (4, 3, 4)


def test_jsonl_csv_and_saved_datasets_are_indexed_together(tmp_path):
    import datasets

    folder = tmp_path / "in"
    folder.mkdir()
    texts = variant_texts(9)
    (folder / "a.jsonl").write_text("".join(json.dumps({"id": f"j{i}", "text": texts[i]}) + "\n" for i in range(3)))
    (folder / "b.csv").write_text("id,text\n" + "".join(f'c{i},"{texts[3 + i]}"\n' for i in range(3)))
    datasets.Dataset.from_dict({"id": ["h0", "h1", "h2"], "text": texts[6:]}).save_to_disk(str(folder / "c"))
    result = index(folder, "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    table = read_embeddings(tmp_path / "out")
    assert sorted(table.column("id").to_pylist()) == ["c0", "c1", "c2", "h0", "h1", "h2", "j0", "j1", "j2"]
    assert SearchIndex.load(tmp_path / "out").meta["num_rows"] == 9


def test_bad_row_with_fail_names_it_and_keeps_finished_units(tmp_path, good_file):
    write_table(tmp_path / "in" / "b.parquet", id=[100, 101, 102], text=["x", "y", "   "])
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--on-bad-row", "fail", "--rows-per-unit", "10")
    assert result.exit_code == 2
    assert "b.parquet" in result.stderr and "id 102" in result.stderr and "whitespace" in result.stderr
    assert "Traceback" not in result.output
    assert_kept(tmp_path / "out")
    assert not (tmp_path / "out" / "index.faiss").exists()


COLUMN_ERRORS = [
    ({"body": ["x"], "id": [1]}, [], ["b.{ext}", "text column 'text' not found", "body, id"]),
    ({"text": ["x"], "id": [1]}, ["--id-column", "doc"], ["b.{ext}", "id column 'doc' not found", "text, id"]),
    ({"text": [7], "id": [1]}, [], ["b.{ext}", "text column 'text' has type int64, not a string"]),
]


@pytest.mark.parametrize("columns, options, expected", COLUMN_ERRORS)
def test_column_errors_of_parquet_inputs_fail_before_anything_is_written(tmp_path, good_file, columns, options,
                                                                         expected):
    """Parquet footers give every column up front: the job stops before embedding, and leaves no OUTPUT (a
    job.json left behind made the corrected command fail for "other settings")."""
    if options:  # the good file needs the id column too
        write_table(good_file, doc=list(range(20)), text=variant_texts(20))
    write_table(tmp_path / "in" / "b.parquet", **columns)
    result = index(tmp_path / "in", "--output", tmp_path / "out", *options)
    assert result.exit_code == 2, result.output
    for part in expected:
        assert part.format(ext="parquet") in result.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "in" / "b.parquet").unlink()
    assert index(tmp_path / "in", "--output", tmp_path / "out", *options).exit_code == 0
    assert_kept(tmp_path / "out")


@pytest.mark.parametrize("columns, options, expected", COLUMN_ERRORS)
def test_column_errors_found_while_reading_keep_the_finished_units(tmp_path, good_file, columns, options, expected):
    """A JSONL file's columns are known once it is read: the units before it stay done."""
    if options:
        write_table(good_file, doc=list(range(20)), text=variant_texts(20))
    (tmp_path / "in" / "b.jsonl").write_text(json.dumps({k: v[0] for k, v in columns.items()}) + "\n")
    result = index(tmp_path / "in", "--output", tmp_path / "out", *options)
    assert result.exit_code == 2, result.output
    for part in expected[:2]:  # a JSONL file lists the columns of its rows in another order
        assert part.format(ext="jsonl") in result.stderr
    assert_kept(tmp_path / "out")


def test_unreadable_files_fail_the_job_and_lose_nothing(tmp_path, good_file):
    assert index(tmp_path / "in", "--output", tmp_path / "out").exit_code == 0
    before = read_embeddings(tmp_path / "out")
    (tmp_path / "in" / "broken.parquet").write_bytes(b"PAR1 truncated")
    result = index(tmp_path / "in", "--output", tmp_path / "out")
    assert result.exit_code == 2 and "broken.parquet" in result.stderr
    (tmp_path / "in" / "broken.parquet").unlink()
    (tmp_path / "in" / "c.jsonl").write_text('{"id": 50, "text": "fine"}\n{not json\n')
    result = index(tmp_path / "in", "--output", tmp_path / "out")
    assert result.exit_code == 2 and "c.jsonl" in result.stderr and "cannot read" in result.stderr
    assert read_embeddings(tmp_path / "out").equals(before)
    assert (tmp_path / "out" / "index.faiss").exists()


def test_skip_bad_files_records_them_and_exits_3(tmp_path, good_file):
    (tmp_path / "in" / "broken.parquet").write_bytes(b"PAR1 truncated")
    (tmp_path / "in" / "c.jsonl").write_text('{"id": 50, "text": "fine"}\n{not json\n')
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--skip-bad-files")
    assert result.exit_code == 3, result.output
    assert "2 bad files skipped" in result.stderr
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert sorted(p["path"].rsplit("/", 1)[1] for p in metrics["bad_files"]) == ["broken.parquet", "c.jsonl"]
    assert_kept(tmp_path / "out")
    assert metrics["index"]["num_rows"] == 20


def test_a_rerun_of_a_finished_job_keeps_its_index(tmp_path, good_file):
    assert index(good_file, "--output", tmp_path / "out").exit_code == 0
    built = (tmp_path / "out" / "index.faiss").stat().st_mtime_ns
    assert index(good_file, "--output", tmp_path / "out").exit_code == 0  # a retry of a job that had finished
    assert (tmp_path / "out" / "index.faiss").stat().st_mtime_ns == built


def test_a_bad_index_factory_fails_before_any_work(tmp_path, good_file):
    result = index(good_file, "--output", tmp_path / "out", "--index-factory", "IVFx,Nope")
    assert result.exit_code == 2 and "index factory 'IVFx,Nope'" in result.stderr
    assert not (tmp_path / "out" / "embeddings").exists()


def test_other_settings_need_overwrite(tmp_path, good_file):
    assert index(good_file, "--output", tmp_path / "out").exit_code == 0
    result = index(good_file, "--output", tmp_path / "out", "--dim", "64")
    assert result.exit_code == 2 and "dim: 384 (stored) != 64 (now)" in result.stderr
    assert_kept(tmp_path / "out")
    assert index(good_file, "--output", tmp_path / "out", "--dim", "64", "--overwrite").exit_code == 0
    table = read_embeddings(tmp_path / "out")
    assert table.num_rows == 20 and table.schema.field("embedding").type.list_size == 64
    assert json.loads((tmp_path / "out" / "index.json").read_text())["dimension"] == 64


def test_config_file_with_command_line_override(tmp_path):
    write_table(tmp_path / "in" / "t.parquet", id=list(range(20)), body=variant_texts(20), source=["s"] * 20)
    config = tmp_path / "job.toml"
    config.write_text('text-column = "body"\ndim = 64\nkeep_columns = ["source"]\nrows-per-unit = 10\n'
                      f'inputs = ["{tmp_path / "in"}"]\n')
    result = index("--config", config, "--output", tmp_path / "out", "--dim", "32")
    assert result.exit_code == 0, result.output
    settings = json.loads((tmp_path / "out" / "job.json").read_text())
    assert (settings["dim"], settings["text_column"], settings["keep_columns"]) == (32, "body", ["source"])
    assert len(completed_units(tmp_path / "out")) == 2
    config.write_text("dims = 64\n")
    result = index(tmp_path / "in", "--config", config, "--output", tmp_path / "out2")
    assert result.exit_code == 2 and "unknown option 'dims'" in result.stderr


def test_shards_cover_every_unit_once_and_merge_equals_one_run(tmp_path):
    write_corpus(tmp_path / "in", variant_texts(90), num_files=3, row_group_size=10)
    common = [tmp_path / "in", "--rows-per-unit", "10", "--keep-columns", "source"]
    assert index(*common, "--output", tmp_path / "one").exit_code == 0
    shards = [tmp_path / f"shard{i}" for i in range(3)]
    for i, shard in enumerate(shards):
        assert index(*common, "--output", shard, "--shard-index", i, "--num-shards", 3).exit_code == 0
        assert not (shard / "index.faiss").exists()
    done = [set(completed_units(shard)) for shard in shards]
    assert sum(map(len, done)) == len(set.union(*done)) == 9
    assert set.union(*done) == set(json.loads((tmp_path / "one" / "units.json").read_text())["units"])
    incomplete = invoke("merge", *shards[:2], "--into", tmp_path / "merged")
    assert incomplete.exit_code == 2 and "3 of the job's 9 units are not done" in incomplete.stderr
    assert invoke("merge", *shards, "--into", tmp_path / "merged").exit_code == 0
    one, merged = SearchIndex.load(tmp_path / "one"), SearchIndex.load(tmp_path / "merged")
    assert merged.ids.equals(one.ids) and merged.meta["num_rows"] == 90
    queries = vectors_of(read_embeddings(tmp_path / "one"))[::7]
    assert [[h["id"] for h in hits] for hits in merged.search(queries, 3)] == \
        [[h["id"] for h in hits] for hits in one.search(queries, 3)]


def test_query_prints_the_row_of_a_corpus_text(tmp_path):
    texts = variant_texts(60)
    write_table(tmp_path / "in" / "t.parquet", id=[f"doc-{i}" for i in range(60)], text=texts, title=texts)
    assert index(tmp_path / "in", "--output", tmp_path / "out", "--keep-columns", "title").exit_code == 0
    result = invoke("query", texts[17], "--index", tmp_path / "out", "-k", "3", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert hits[0]["id"] == "doc-17" and hits[0]["title"] == texts[17]
    assert hits[0]["score"] == pytest.approx(1.0, abs=1e-4) and len(hits) == 3
    table = invoke("query", texts[17], "--index", tmp_path / "out", "--device", "cpu").stdout.splitlines()
    assert table[0].split()[:3] == ["rank", "score", "id"] and table[1].split()[:3] == ["1", "1.0000", "doc-17"]
    missing = invoke("query", "x", "--index", tmp_path / "in", "--device", "cpu")
    assert missing.exit_code == 2 and "holds no index" in missing.stderr


def test_query_without_index_prints_the_embedding():
    result = invoke("query", "hello world", "--device", "cpu", "--dim", "32")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["text"] == "hello world" and len(row["embedding"]) == 32
    assert np.linalg.norm(row["embedding"]) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("budget,kept", [(1 << 30, True), (1, False)])
def test_a_flat_index_is_built_from_the_vectors_the_job_kept_within_its_budget(tmp_path, tiny_model, monkeypatch,
                                                                              budget, kept):
    """The job hands its written vectors to the Flat index build; past the budget it keeps none and the
    build reads the files. Either way the index equals one built from the files (merge)."""
    from embedpipe.pipeline.index import runner
    from embedpipe.pipeline.output import faiss_index, job_files as outputs

    write_corpus(tmp_path / "in", variant_texts(300), num_files=2, row_group_size=50)
    given = []
    build = faiss_index.build_index
    monkeypatch.setattr(runner, "in_memory_budget", lambda: budget)
    monkeypatch.setattr(outputs, "build_index", lambda *a, **k: given.append(k["in_memory"]) or build(*a, **k))
    result = invoke("index", tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model, "--device", "cpu",
                    "--rows-per-unit", "50", "-q")
    assert result.exit_code == 0, result.stderr
    files = {tmp_path / "out" / "embeddings" / r["file_name"] for r in completed_units(tmp_path / "out").values()}
    assert (given[0] is not None and set(given[0]) == files) == kept
    monkeypatch.setattr(outputs, "build_index", build)
    assert invoke("merge", tmp_path / "out", "--into", tmp_path / "merged").exit_code == 0
    ours, theirs = (SearchIndex.load(tmp_path / name).index for name in ("out", "merged"))
    assert np.array_equal(ours.reconstruct_n(0, 300), theirs.reconstruct_n(0, 300))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA GPU")
def test_device_cuda_without_a_gpu_is_a_one_line_usage_error_and_writes_nothing(tmp_path, good_file):
    result = invoke("index", tmp_path / "in", "--output", tmp_path / "out", "--device", "cuda", "--workers", "0")
    assert result.exit_code == 2, result.output
    assert "no CUDA GPU" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_an_ivf_index_with_more_clusters_than_rows_fails_before_embedding(tmp_path, good_file):
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--index-factory", "IVF64,Flat")
    assert result.exit_code == 2, result.output
    assert "trains 64 clusters, but the inputs have 20 rows" in result.stderr
    assert not (tmp_path / "out").exists()
    assert index(tmp_path / "in", "--output", tmp_path / "out", "--index-factory", "IVF4,Flat").exit_code == 0


def test_overwrite_starts_afresh_with_the_same_settings_and_is_refused_for_shards(tmp_path, good_file):
    assert index(tmp_path / "in", "--output", tmp_path / "out").exit_code == 0
    (tmp_path / "out" / "embeddings" / "stray.parquet").write_bytes(b"left by hand")
    result = invoke("index", tmp_path / "in", "--output", tmp_path / "out", "--overwrite", "--device", "cpu",
                    "--workers", "0")
    assert result.exit_code == 0, result.output
    assert "0 already done" in result.stderr and not (tmp_path / "out" / "embeddings" / "stray.parquet").exists()
    assert_kept(tmp_path / "out")
    sharded = index(tmp_path / "in", "--output", tmp_path / "out", "--overwrite", "--shard-index", "0",
                    "--num-shards", "2")
    assert sharded.exit_code == 2 and "the other shards' results too" in sharded.stderr


def test_the_text_column_can_be_kept_and_comes_back_with_each_hit(tmp_path):
    """--keep-columns text: the passage beside its vector, in the unit files, index_ids.parquet and query's hits."""
    texts = variant_texts(60)
    write_table(tmp_path / "in" / "a.parquet", id=list(range(60)), text=texts, title=[f"t{i}" for i in range(60)])
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--keep-columns", "text,title")
    assert result.exit_code == 0, result.output
    table = read_embeddings(tmp_path / "out").sort_by("id")
    assert table.column_names == ["id", "embedding", "text", "title"]
    assert table.column("text").to_pylist() == texts
    ids_table = pq.read_table(tmp_path / "out" / "index_ids.parquet").sort_by("id")
    assert ids_table.column("text").to_pylist() == texts
    hits = json.loads(invoke("query", texts[17], "--index", tmp_path / "out", "-k", "2", "--json",
                             "--device", "cpu").stdout)
    assert hits[0]["id"] == 17 and hits[0]["text"] == texts[17] and hits[0]["title"] == "t17"


def test_an_int8_job_builds_an_sq8_index_by_default_and_it_finds_each_row(tmp_path):
    """int8 vectors take a byte a dimension on disk; the default index keeps them so in memory (SQ8), not as
    float (Flat held 4 bytes)."""
    import faiss

    texts = variant_texts(80)
    write_table(tmp_path / "in" / "a.parquet", id=list(range(80)), text=texts)
    assert index(tmp_path / "in", "--output", tmp_path / "out", "--dtype", "int8").exit_code == 0
    meta = json.loads((tmp_path / "out" / "index.json").read_text())
    assert meta["factory"] == "SQ8"
    # one key per fact: the index's dimension (not also the job's dim), the model's normalize (not also the
    # index's normalized, which for int8 said False beside it: the metric says "cosine")
    assert (meta["dimension"], meta["normalize"], meta["metric"]) == (384, True, "cosine")
    assert "dim" not in meta and "normalized" not in meta
    assert isinstance(faiss.read_index(str(tmp_path / "out" / "index.faiss")), faiss.IndexScalarQuantizer)
    hits = json.loads(invoke("query", texts[33], "--index", tmp_path / "out", "-k", "1", "--json",
                             "--device", "cpu").stdout)
    assert hits[0]["id"] == 33
    merged = invoke("merge", tmp_path / "out", "--into", tmp_path / "merged")
    assert merged.exit_code == 0, merged.output
    assert json.loads((tmp_path / "merged" / "index.json").read_text())["factory"] == "SQ8"


def test_rejected_parquet_keeps_the_inputs_int_ids(tmp_path):
    write_table(tmp_path / "in" / "t.parquet", id=[10, 11, 12], text=["fine", "", "also fine"])
    assert index(tmp_path / "in", "--output", tmp_path / "out").exit_code == 0
    rejected = pq.read_table(tmp_path / "out" / "rejected.parquet")
    assert rejected.schema.field("id").type == pa.int64() and rejected.column("id").to_pylist() == [11]


@pytest.mark.parametrize("options, message", [
    (["--keep-columns", "embedding"], "`embedding` names the unit files' vector column"),
    (["--id-column", "embedding"], "`embedding` names the unit files' vector column"),
    (["--max-batch-tokens", "0"], "max-batch-tokens must be positive, not 0"),
    (["--num-shards", "0", "--shard-index", "0"], "num-shards must be positive, not 0"),
])
def test_usage_errors_are_one_line_exit_2_before_any_work(tmp_path, good_file, options, message):
    result = index(tmp_path / "in", "--output", tmp_path / "out", *options)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_and_an_input_folder_without_inputs_are_usage_errors(tmp_path, good_file):
    (tmp_path / "a-file").write_text("not a folder")
    result = index(tmp_path / "in", "--output", tmp_path / "a-file")
    assert result.exit_code == 2 and "is a file; name a folder" in result.stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no input here")
    result = index(tmp_path / "empty", "--output", tmp_path / "out")
    assert result.exit_code == 2 and "the folder holds no input files" in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_output_inside_the_input_folder_is_not_read_as_input(tmp_path, good_file):
    for _ in range(2):  # the second run finds OUTPUT's unit files among the inputs' folder
        result = index(tmp_path / "in", "--output", tmp_path / "in" / "out")
        assert result.exit_code == 0, result.output
    assert read_embeddings(tmp_path / "in" / "out").num_rows == 20
    assert json.loads((tmp_path / "in" / "out" / "units.json").read_text())["units"] == \
        ["a.parquet#rg000000-000002"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a CUDA GPU")
def test_embed_on_cuda_without_a_gpu_is_a_one_line_usage_error():
    result = invoke("embed", "hello", "--device", "cuda")
    assert result.exit_code == 2 and "no CUDA GPU" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_ids_that_cannot_be_kept_exactly_are_refused_naming_the_file(tmp_path):
    """A JSONL id beyond int64 made every id a float (9223372036854775807 and ...808 became equal); float ids
    and int64 / uint64 ids across files failed only at the index build, forever."""
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "a.jsonl").write_text('{"id": 9223372036854775807, "text": "a"}\n'
                                            '{"id": 9223372036854775808, "text": "b"}\n')
    result = index(tmp_path / "j", "--output", tmp_path / "out-j")
    assert result.exit_code == 2 and "a.jsonl: id column 'id' has type double" in result.stderr
    write_table(tmp_path / "f" / "a.parquet", id=[1.5, float("nan")], text=["a", "b"])
    result = index(tmp_path / "f", "--output", tmp_path / "out-f")
    assert result.exit_code == 2 and "ids are integers or strings" in result.stderr
    write_table(tmp_path / "u" / "a.parquet", id=pa.array([1, 2], pa.int64()), text=["a", "b"])
    write_table(tmp_path / "u" / "b.parquet", id=pa.array([2**63, 2**63 + 1], pa.uint64()), text=["c", "d"])
    result = index(tmp_path / "u", "--output", tmp_path / "out-u")
    assert result.exit_code == 2 and "b.parquet: column 'id' is uint64 here but int64" in result.stderr
    assert not (tmp_path / "out-u").exists()  # refused before anything was embedded


def test_a_shards_rerun_removes_its_own_temporaries_and_merge_removes_a_killed_merges(tmp_path):
    """A killed shard's partial unit files stayed for good (only whole jobs cleaned up), as did a killed
    merge's index temporaries; a shard leaves the other shards' alone (they may be writing them)."""
    from embedpipe.pipeline.output.layout import unit_file

    write_corpus(tmp_path / "in", variant_texts(40), num_files=1, row_group_size=10)
    shard = ["--rows-per-unit", "10", "--num-shards", "2"]
    assert index(tmp_path / "in", "--output", tmp_path / "out", *shard, "--shard-index", "0").exit_code == 0
    units = json.loads((tmp_path / "out" / "units.json").read_text())["units"]
    mine, theirs = (unit_file(tmp_path / "out", "embeddings", units[0]),
                    unit_file(tmp_path / "out", "embeddings", units[1]))
    partial_mine = mine.parent / f".{mine.name}.tmp-123-abc"
    partial_theirs = theirs.parent / f".{theirs.name}.tmp-456-def"
    partial_mine.write_bytes(b"partial"), partial_theirs.write_bytes(b"partial")
    assert index(tmp_path / "in", "--output", tmp_path / "out", *shard, "--shard-index", "0").exit_code == 0
    assert not partial_mine.exists() and partial_theirs.exists()
    assert index(tmp_path / "in", "--output", tmp_path / "out", *shard, "--shard-index", "1").exit_code == 0
    stale = tmp_path / "merged" / ".index.faiss.tmp-789-xyz"
    stale.parent.mkdir()
    stale.write_bytes(b"partial")
    assert invoke("merge", tmp_path / "out", "--into", tmp_path / "merged").exit_code == 0
    assert not stale.exists() and (tmp_path / "merged" / "index.faiss").exists()
