"""Hostile input, one fixture each, through `embedpipe index` in this process with a tiny random model.

Every row ends embedded (with the reference model's vector) or rejected, never lost or doubled;
what cannot be indexed fails with a message naming the file and column.
"""
from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from support.numerics import cosine
from support.corpus import TEXTS, read_embeddings, vectors_of
from embedpipe.cli.main import app
from embedpipe.pipeline.text.tokenizer import TextTokenizer


def index(*args):
    return CliRunner().invoke(app, ["index", *map(str, args), "--device", "cpu", "--quiet"])


def verify(*args):
    return CliRunner().invoke(app, ["verify", *map(str, args)])


def write(path, **columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture(scope="module")
def reference(tiny_model):
    """texts -> the transformers model's normalised mean-pooled vectors, on our tokenizer's ids."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(tiny_model)).eval()
    tokenizer = TextTokenizer(tiny_model / "tokenizer.json", 512)

    def vectors(texts: list[str]) -> np.ndarray:
        out = []
        for ids in tokenizer.encode(texts)[0]:
            with torch.no_grad():
                hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            out.append(torch.nn.functional.normalize(hidden.mean(0), dim=0).numpy())
        return np.stack(out)
    return vectors


def assert_embedded_as_the_reference(output, ids, texts, reference):
    table = read_embeddings(output)
    assert table.column(0).to_pylist() == ids
    vectors = vectors_of(table)
    assert np.isfinite(vectors).all()
    assert cosine(vectors, reference(texts)).min() >= 0.9999


def test_invalid_utf8_in_a_binary_column_is_replaced_not_lost(tmp_path, tiny_model, reference):
    raw = [b"caf\xc3\xa9", b"bad \xff\xfe bytes", b"\xc3", b"cut \xe6\x97"]
    write(tmp_path / "in" / "b.parquet", id=[0, 1, 2, 3], text=pa.array(raw, pa.binary()))
    assert index(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model).exit_code == 0
    decoded = [b.decode("utf-8", "replace") for b in raw]  # U+FFFD for each bad sequence
    assert_embedded_as_the_reference(tmp_path / "out", [0, 1, 2, 3], decoded, reference)


def test_control_characters_and_special_tokens_only(tmp_path, tiny_model, reference):
    texts = ["\x00\x01\x02", "tab\tand\x1b[31mcolour\x1b[0m", "\u200b\u200e\u202e\ufeff", "nul\x00inside",
             "[CLS] [SEP] [PAD] [MASK] [UNK]", "[PAD]", "[SEP][SEP][SEP]"]
    write(tmp_path / "in" / "c.parquet", id=list(range(len(texts))), text=texts)
    assert index(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model).exit_code == 0
    assert_embedded_as_the_reference(tmp_path / "out", list(range(len(texts))), texts, reference)
    special_ids = TextTokenizer(tiny_model / "tokenizer.json", 512).encode(["[PAD]"])[0][0]
    assert special_ids == [101, 0, 102]  # kept as the special token, not spelled out


def test_a_column_type_change_across_files(tmp_path, tiny_model):
    write(tmp_path / "in" / "a.parquet", id=pa.array([1, 2], pa.int32()), text=["one", "two"], src=["a", "a"])
    write(tmp_path / "in" / "b.parquet", id=pa.array([3], pa.int64()), text=pa.array(["three"], pa.large_string()),
          src=pa.array(["b"], pa.large_string()))
    write(tmp_path / "in" / "c.parquet", id=pa.array(["4"]), text=["four"], src=["c"])
    args = ["--model", tiny_model, "--keep-columns", "src"]
    for extra in ([], ["--devices", "cpu:2"]):  # found from the files' footers before anything is embedded
        result = index(tmp_path / "in", "--output", tmp_path / "out", *args, *extra)
        assert result.exit_code == 2
        assert "c.parquet: column 'id' is string here but int64 in the files before it" in result.stderr
        assert not list((tmp_path / "out").glob("embeddings/*.parquet"))
    (tmp_path / "in" / "c.parquet").unlink()
    assert index(tmp_path / "in", "--output", tmp_path / "out", *args).exit_code == 0
    for shard in (0, 1):  # shard 0 writes int32 ids and string columns, shard 1 int64 and large_string
        assert index(tmp_path / "in", "--output", tmp_path / f"shard{shard}", *args,
                     "--shard-index", shard, "--num-shards", 2).exit_code == 0
    merged = CliRunner().invoke(app, ["merge", str(tmp_path / "shard0"), str(tmp_path / "shard1"),
                                      "--into", str(tmp_path / "merged")])
    assert merged.exit_code == 0, merged.output
    for index_dir in (tmp_path / "out", tmp_path / "merged"):
        ids = pq.read_table(index_dir / "index_ids.parquet")
        assert ids.schema.field("id").type == pa.int64() and ids.column("id").to_pylist() == [1, 2, 3]
        assert ids.schema.field("src").type == pa.large_string()
    shards = verify(tmp_path / "shard0", tmp_path / "shard1", "--index", tmp_path / "merged",
                    "--input", tmp_path / "in")
    assert shards.exit_code == 0, shards.output


def test_zero_row_files_are_units_with_no_rows(tmp_path, tiny_model):
    folder = tmp_path / "in"
    write(folder / "a.parquet", id=pa.array([], pa.int64()), text=pa.array([], pa.string()))
    write(folder / "b.parquet", id=[7], text=["the only row"])
    (folder / "c.jsonl").write_bytes(b"")
    (folder / "d.jsonl.gz").write_bytes(gzip.compress(b"\n  \n"))
    (folder / "e.csv").write_text("id,text\n")  # a header only: its ids are strings
    (folder / "f.csv").write_bytes(b"")
    result = index(folder, "--output", tmp_path / "out", "--model", tiny_model)
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (metrics["units"]["done"], metrics["rows"], metrics["index"]["num_rows"]) == (6, 1, 1)
    assert verify(tmp_path / "out", "--input", folder).exit_code == 0


def test_files_that_are_not_inputs_inside_an_input_folder(tmp_path, tiny_model):
    folder = tmp_path / "in"
    write(folder / "part-0.parquet", id=[1, 2], text=["one", "two"])
    (folder / "_SUCCESS").write_text("")  # what Spark leaves next to its Parquet files
    (folder / ".part-0.parquet.crc").write_bytes(b"\x00crc")
    write(folder / ".part-1.parquet", id=[8], text=["a writer's hidden temporary"])
    write(folder / "_part-2.parquet", id=[9], text=["Hadoop's convention: names starting with _ are not data"])
    (folder / "README.md").write_text("# not data")
    (folder / "fake.parquet").write_text("id,text\n3,three\n")  # a CSV under a Parquet name
    result = index(folder, "--output", tmp_path / "out", "--model", tiny_model)
    assert result.exit_code == 2 and "fake.parquet: cannot read input" in result.stderr
    result = index(folder, "--output", tmp_path / "out", "--model", tiny_model, "--skip-bad-files")
    assert result.exit_code == 3
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert [bad["path"] for bad in metrics["bad_files"]] == [str(folder / "fake.parquet")]
    assert read_embeddings(tmp_path / "out").column("id").to_pylist() == [1, 2]
    assert verify(tmp_path / "out").exit_code == 0


def test_duplicate_ids_are_kept_as_they_come_and_reported(tmp_path, tiny_model):
    write(tmp_path / "in" / "a.parquet", id=["x", "y", "x"], text=["first x", "y", "second x"])
    write(tmp_path / "in" / "b.parquet", id=["y", "z"], text=["another y", "z"])
    result = CliRunner().invoke(app, ["index", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                                      "--model", str(tiny_model), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "warning: 2 ids occur more than once (each row is kept)" in result.stderr
    assert sorted(read_embeddings(tmp_path / "out").column("id").to_pylist()) == ["x", "x", "y", "y", "z"]
    assert json.loads((tmp_path / "out" / "index.json").read_text())["duplicate_ids"] == 2
    checked = verify(tmp_path / "out", "--input", tmp_path / "in")
    assert checked.exit_code == 0 and "warn  2 ids occur more than once" in checked.stdout


ID_TYPES = {
    "int8": (pa.int8(), [-128, 0, 127]), "int16": (pa.int16(), [-32768, 1, 32767]),
    "int32": (pa.int32(), [-2**31, 2, 2**31 - 1]), "int64": (pa.int64(), [-2**63, 3, 2**63 - 1]),
    "uint8": (pa.uint8(), [0, 1, 255]), "uint16": (pa.uint16(), [0, 1, 65535]),
    "uint32": (pa.uint32(), [0, 1, 2**32 - 1]), "uint64": (pa.uint64(), [0, 2**63, 2**64 - 1]),
    "string": (pa.string(), ["", "naïve", "東京"]), "large_string": (pa.large_string(), ["a", "b" * 300, "🙂"]),
    "string_view": (pa.string_view(), ["x", "y" * 20, "z"]),  # stored as string
    "dictionary": (pa.dictionary(pa.int32(), pa.string()), ["red", "green", "blue"]),
}


@pytest.mark.parametrize("name", list(ID_TYPES))
def test_ids_of_every_integer_and_string_type(tmp_path, tiny_model, name):
    id_type, values = ID_TYPES[name]
    write(tmp_path / "in" / "t.parquet", doc=pa.array(values, id_type), text=["one", "two", "three"])
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model, "--id-column", "doc")
    assert result.exit_code == 0, result.output
    stored = pq.read_table(tmp_path / "out" / "embeddings")
    ids = pq.read_table(tmp_path / "out" / "index_ids.parquet").column("doc")
    assert stored.schema.field("doc").type == ids.type == (pa.string() if name == "string_view" else id_type)
    assert ids.to_pylist() == values
    hits = CliRunner().invoke(app, ["query", "two", "--index", str(tmp_path / "out"), "--json", "-k", "1",
                                    "--device", "cpu"])
    assert json.loads(hits.stdout)[0]["id"] == values[1]
    assert verify(tmp_path / "out", "--input", tmp_path / "in").exit_code == 0


def test_100k_character_jsonl_lines_and_a_5_mb_text(tmp_path, tiny_model, reference):
    long_texts = [(" ".join(TEXTS) * 40)[start:start + 100_000] for start in (0, 7, 99)]
    rows = [{"id": i, "text": text} for i, text in enumerate(["short", *long_texts, "also short"])]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    huge = (" ".join(TEXTS) * 400)[:5_000_000]
    write(tmp_path / "in" / "b.parquet", id=[5], text=[huge])
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["truncated_texts"] == 4
    # a 100k-character prefix holds far more than 512 tokens: the whole text's kept tokens
    expected = [row["text"] for row in rows] + [huge[:100_000]]
    assert_embedded_as_the_reference(tmp_path / "out", list(range(6)), expected, reference)


def test_a_10_mb_text_of_one_word_is_read_to_the_bound_and_counted_truncated(tmp_path, tiny_model, reference):
    """No prefix proves such a text's tokens, so the search read it whole (11-48 s a text); it stops at
    max_text_chars, whose tokens the whole text has too for this WordPiece model (a word past 100 characters
    is [UNK])."""
    write(tmp_path / "in" / "a.parquet", id=[0, 1], text=["short", "x" * 10_000_000])
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["truncated_texts"] == 1
    assert_embedded_as_the_reference(tmp_path / "out", [0, 1], ["short", "x" * 200], reference)


def test_corrupt_parquet_pages_are_one_line_naming_the_file(tmp_path, tiny_model):
    """pyarrow's message spans three lines ("Couldn't deserialize thrift ... / Deserializing page header
    failed. / "): the last named no file."""
    path = write(tmp_path / "in" / "a.parquet", id=list(range(500)), text=[f"text {i} " * 5 for i in range(500)])
    data = bytearray(path.read_bytes())
    data[4:12] = bytes(b ^ 0xFF for b in data[4:12])  # the first data page's header
    path.write_bytes(bytes(data))
    result = index(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "page header" in lines[0], result.stderr
