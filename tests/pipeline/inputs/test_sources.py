from __future__ import annotations

import gzip
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from embedpipe.pipeline.inputs import sources
from embedpipe.pipeline.inputs.sources import (ColumnSpec, InputError, WorkUnit, bad_text_reasons, jsonl_lines,
                                               list_units, read_unit)


def write_parquet(path, num_rows, row_group_size=10, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"text": [f"{path.name} row {i}" for i in range(num_rows)], **extra})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def read_all(units, columns=ColumnSpec(), batch_rows=4096) -> pa.Table:
    return pa.Table.from_batches([b for u in units for b in read_unit(u, columns, batch_rows)])


def test_parquet_units_group_row_groups_and_cover_every_row_once(tmp_path):
    write_parquet(tmp_path / "a.parquet", 35)  # row groups of 10, 10, 10, 5
    write_parquet(tmp_path / "b.parquet", 20)
    units = list_units([str(tmp_path)], rows_per_unit=25)
    assert units == list_units([str(tmp_path)], rows_per_unit=25)
    assert [u.unit_id for u in units] == ["a.parquet#rg000000-000002", "a.parquet#rg000002-000004",
                                          "b.parquet#rg000000-000002"]
    table = read_all(units, batch_rows=7)
    assert table.column_names == ["id", "text"]
    expected = [f"a.parquet row {i}" for i in range(35)] + [f"b.parquet row {i}" for i in range(20)]
    assert table.column("text").to_pylist() == expected
    assert table.column("id").to_pylist()[:2] == ["a.parquet:0", "a.parquet:1"]
    assert table.column("id").to_pylist()[-1] == "b.parquet:19"
    assert max(b.num_rows for u in units for b in read_unit(u, ColumnSpec(), 7)) == 7


def test_derived_ids_do_not_depend_on_unit_size_or_corpus_location(tmp_path):
    write_parquet(tmp_path / "corpus" / "sub" / "a.parquet", 45)
    small = read_all(list_units([str(tmp_path / "corpus")], rows_per_unit=10))
    large = read_all(list_units([str(tmp_path / "corpus")], rows_per_unit=1000))
    shutil.move(tmp_path / "corpus", tmp_path / "moved")
    moved = read_all(list_units([str(tmp_path / "moved")], rows_per_unit=20))
    assert small.column("id") == large.column("id") == moved.column("id")
    assert small.column("id")[44].as_py() == "sub/a.parquet:44"


def test_directory_ignores_unknown_and_hidden_files(tmp_path):
    write_parquet(tmp_path / "a.parquet", 3)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text('{"text": "x"}\n')
    (tmp_path / "README.txt").write_text("not an input")
    (tmp_path / ".a.parquet.tmp-1").write_text("partial")
    units = list_units([str(tmp_path)])
    assert [u.unit_id for u in units] == ["a.parquet#rg000000-000001", "sub/b.jsonl"]
    assert [u.format for u in units] == ["parquet", "jsonl"]


def test_glob_and_duplicates(tmp_path):
    for name in ["x1.parquet", "x2.parquet", "y.parquet"]:
        write_parquet(tmp_path / "d" / name, 2)
    units = list_units([str(tmp_path / "*" / "x*.parquet"), str(tmp_path / "d" / "x1.parquet")])
    assert [u.unit_id for u in units] == ["d/x1.parquet#rg000000-000001", "d/x2.parquet#rg000000-000001"]


def test_single_file_argument_uses_its_name(tmp_path):
    path = write_parquet(tmp_path / "deep" / "f.parquet", 2)
    assert [u.id_prefix for u in list_units([str(path)])] == ["f.parquet"]


@pytest.mark.parametrize("argument", ["missing.parquet", "nothing*.parquet"])
def test_missing_inputs_are_named(tmp_path, argument):
    with pytest.raises(InputError, match=argument.replace("*", r"\*")):
        list_units([str(tmp_path / argument)])


def test_same_relative_name_from_two_arguments_is_rejected(tmp_path):
    first = write_parquet(tmp_path / "a" / "f.parquet", 2)
    second = write_parquet(tmp_path / "b" / "f.parquet", 2)
    with pytest.raises(InputError, match="f.parquet"):
        list_units([str(first), str(second)])


def test_jsonl_reading_keeps_id_types_and_columns(tmp_path):
    rows = [{"doc": i, "text": f"t{i}", "lang": "en"} for i in range(5)]
    with gzip.open(tmp_path / "a.jsonl.gz", "wt") as out:
        out.write("\n".join(json.dumps(r) for r in rows))
    units = list_units([str(tmp_path)])
    table = read_all(units, ColumnSpec(id="doc", keep=("lang",)))
    assert table.column_names == ["doc", "text", "lang"]
    assert table.column("doc").type == pa.int64()
    assert table.column("doc").to_pylist() == list(range(5))
    assert table.column("lang").to_pylist() == ["en"] * 5


def test_jsonl_with_null_texts_in_first_block(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "TEXT_BLOCK_BYTES", 64)
    lines = [json.dumps({"text": None})] * 20 + [json.dumps({"text": "late"})]
    (tmp_path / "a.ndjson").write_text("\n".join(lines))
    table = read_all(list_units([str(tmp_path)]))
    assert table.column("text").type == pa.string()
    assert table.column("text").to_pylist() == [None] * 20 + ["late"]


def test_csv_reads_ids_as_strings_and_multiline_texts(tmp_path):
    (tmp_path / "a.csv").write_text('id,text,n\n007,"two\nlines",1\n008,plain,2\n')
    table = read_all(list_units([str(tmp_path / "a.csv")]), ColumnSpec(keep=("n",)))
    assert table.to_pydict() == {"id": ["007", "008"], "text": ["two\nlines", "plain"], "n": [1, 2]}


def test_hf_saved_dataset_and_dataset_dict(tmp_path):
    import datasets

    data = {"text": [f"t{i}" for i in range(25)], "id": list(range(25))}
    datasets.Dataset.from_dict(data).save_to_disk(str(tmp_path / "ds"))
    split = datasets.Dataset.from_dict({"text": ["a", "b"]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    units = list_units([str(tmp_path / "ds"), str(tmp_path / "dd")], rows_per_unit=10)
    assert [u.unit_id for u in units] == [f"ds#rows{a:012d}-{b:012d}" for a, b in ((0, 10), (10, 20), (20, 25))] + \
        [f"{split}#rows{0:012d}-{2:012d}" for split in ("test", "train")]
    table = read_all(units[:3], batch_rows=4)
    assert table.to_pydict() == data
    assert read_all(units[3:4]).column("id").to_pylist() == ["test:0", "test:1"]


@pytest.mark.parametrize("columns, expected", [
    (ColumnSpec(text="body"), ["'body'", "text", "n", "name"]),
    (ColumnSpec(id="doc_id"), ["'doc_id'", "text", "n", "name"]),
    (ColumnSpec(keep=("url",)), ["url", "text", "n", "name"]),
    (ColumnSpec(text="n"), ["'n'", "int64"]),
])
def test_column_errors_name_file_and_columns(tmp_path, columns, expected):
    write_parquet(tmp_path / "bad.parquet", 3, n=[1, 2, 3], name=["a", "b", "c"])
    (unit,) = list_units([str(tmp_path)])
    with pytest.raises(InputError) as error:
        list(read_unit(unit, columns))
    for part in ["bad.parquet", *expected]:
        assert part in str(error.value)


def test_corrupt_files_are_named(tmp_path):
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="broken.parquet"):
        list_units([str(tmp_path)])
    (tmp_path / "broken.parquet").unlink()
    (tmp_path / "broken.jsonl").write_text('{"text": "ok"}\n{not json\n')
    (unit,) = list_units([str(tmp_path)])
    with pytest.raises(InputError, match="broken.jsonl"):
        list(read_unit(unit, ColumnSpec()))


def test_null_id_is_reported_with_its_row(tmp_path):
    write_parquet(tmp_path / "a.parquet", 3, id=[1, None, 3])
    (unit,) = list_units([str(tmp_path)])
    with pytest.raises(InputError, match="a.parquet.*row 1"):
        list(read_unit(unit, ColumnSpec()))


def test_binary_text_is_decoded_with_replacement(tmp_path):
    texts = pa.array([b"ok", b"bad \xff byte", None], pa.large_binary())
    table = pa.table({"text": texts, "id": pa.array([1, 2, 3], pa.int32())})
    pq.write_table(table, tmp_path / "b.parquet")
    table = read_all(list_units([str(tmp_path)]))
    assert table.column("text").type == pa.large_string()
    assert table.column("text").to_pylist() == ["ok", "bad \ufffd byte", None]
    assert table.column("id").type == pa.int32()


def test_zero_row_parquet_reads_as_empty(tmp_path):
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "empty.parquet")
    batches = [b for u in list_units([str(tmp_path)]) for b in read_unit(u, ColumnSpec())]
    assert sum(b.num_rows for b in batches) == 0
    assert all(b.schema.names == ["id", "text"] for b in batches)


def test_bad_text_reasons():
    texts = pa.array(["fine", None, "", " \t\n", "  x  "])
    assert bad_text_reasons(texts).tolist() == ["", "null", "empty", "whitespace", ""]


def test_column_spec_rejects_overlapping_names_but_may_keep_the_text():
    assert ColumnSpec(text="body", keep=("body", "title")).keep == ("body", "title")  # the passage beside its vector
    for bad in [dict(text="body", id="body"), dict(text="body", id="doc", keep=("doc",)),
                dict(text="body", keep=("title", "title")), dict(text="", keep=())]:
        with pytest.raises(ValueError, match="distinct and non-empty"):
            ColumnSpec(**bad)


def test_a_large_jsonl_file_is_cut_into_ranges_of_whole_lines_that_read_as_the_whole_file(tmp_path):
    """Byte ranges at line ends, in order, covering the file; derived ids count rows from the file's start."""
    lines = [json.dumps({"text": f"row {i} " + "x" * (i % 37)}) for i in range(500)]
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(lines) + "\n")
    units = list_units([str(path)], rows_per_unit=4)  # 4 KiB units
    assert len(units) > 3 and [u.unit_id for u in units] == sorted(u.unit_id for u in units)
    assert units[0].start == 0 and units[-1].stop == path.stat().st_size
    assert all(a.stop == b.start for a, b in zip(units, units[1:]))
    data = path.read_bytes()
    assert all(data[u.stop - 1:u.stop] == b"\n" for u in units)
    whole = [row for batch in read_unit(WorkUnit("big.jsonl", str(path), "jsonl", 0, -1, "big.jsonl"),
                                        ColumnSpec()) for row in batch.to_pylist()]
    parts = [row for unit in units for batch in read_unit(unit, ColumnSpec()) for row in batch.to_pylist()]
    assert parts == whole and whole[499]["id"] == "big.jsonl:499"
    assert list_units([str(path)], rows_per_unit=65536)[0].unit_id == "big.jsonl"  # small for the default: whole


def test_jsonl_units_know_their_rows_for_the_progress_bar(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"row {i}"}) for i in range(300)))  # no line end at the end
    units = list_units([str(path)], rows_per_unit=1)  # 1 KiB ranges
    assert len(units) > 1 and sum(jsonl_lines(u) for u in units) == 300
    assert jsonl_lines(list_units([str(path)])[0]) == 300
    (tmp_path / "b.jsonl.gz").write_bytes(b"")
    assert jsonl_lines(WorkUnit("b", str(tmp_path / "b.jsonl.gz"), "jsonl", 0, -1, "b")) is None
