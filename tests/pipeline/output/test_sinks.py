from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from embedpipe.pipeline.output.layout import safe_name
from embedpipe.pipeline.output.sinks import RejectedWriter, UnitWriter, embedding_type, read_rejected

DTYPE_ARRAYS = {
    "float32": lambda rng, n, d: rng.standard_normal((n, d)).astype(np.float32),
    "float16": lambda rng, n, d: rng.standard_normal((n, d)).astype(np.float16),
    "int8": lambda rng, n, d: rng.integers(-128, 128, (n, d), dtype=np.int8),
    "binary": lambda rng, n, d: rng.integers(0, 256, (n, d), dtype=np.uint8),
}


def all_files(folder):
    return sorted(p.name for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("dtype_name", list(DTYPE_ARRAYS))
def test_round_trip_of_every_dtype(tmp_path, dtype_name):
    rng = np.random.default_rng(0)
    batches = [DTYPE_ARRAYS[dtype_name](rng, n, 8) for n in (5, 3)]
    with UnitWriter(tmp_path, "a.parquet#rg0-2", 8, dtype_name, pa.field("id", pa.int64())) as writer:
        for start, vectors in zip((0, 5), batches):
            writer.write(pa.array(range(start, start + len(vectors)), pa.int64()), vectors)
    table = pq.read_table(writer.path)
    assert writer.path.parent == tmp_path / "embeddings"
    assert table.schema.field("embedding").type == pa.list_(embedding_type(dtype_name), 8)
    values = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, 8)
    np.testing.assert_array_equal(values, np.concatenate(batches))
    assert table.column("id").to_pylist() == list(range(8))


ID_TYPES = [pa.int32(), pa.int64(), pa.uint64(), pa.string(), pa.large_string()]


@pytest.mark.parametrize("id_type", ID_TYPES)
def test_id_and_kept_types_survive_an_empty_first_batch(tmp_path, id_type):
    id_field, kept_field = pa.field("doc", id_type), pa.field("url", pa.large_string())
    with UnitWriter(tmp_path, "u", 4, "float32", id_field, [kept_field]) as writer:
        no_urls = [pa.array([], pa.large_string())]
        writer.write(pa.array([], id_type), np.zeros((0, 4), np.float32), no_urls)
        ids = pa.array([1, 2], pa.int64()).cast(id_type)
        writer.write(ids, np.ones((2, 4), np.float32), [pa.array(["u1", "u2"], pa.large_string())])
    table = pq.read_table(writer.path)
    assert table.schema.names == ["doc", "embedding", "url"]
    assert table.schema.field("doc").type == id_type
    assert table.schema.field("url").type == pa.large_string()
    assert table.column("doc").to_pylist() == ids.to_pylist()


def test_empty_unit_still_gets_a_file(tmp_path):
    with UnitWriter(tmp_path, "u", 4, "float16", pa.field("id", pa.string())) as writer:
        pass
    assert pq.read_table(writer.path).num_rows == 0


def test_mismatched_batches_are_rejected(tmp_path):
    with UnitWriter(tmp_path, "u", 4, "float16", pa.field("id", pa.string())) as writer:
        with pytest.raises(ValueError, match="float16"):
            writer.write(pa.array(["a"]), np.zeros((1, 4), np.float32))
        with pytest.raises(ValueError, match="types"):
            writer.write(pa.array([1]), np.zeros((1, 4), np.float16))


def test_abort_and_exception_leave_no_files(tmp_path):
    writer = UnitWriter(tmp_path, "u", 2, "float32", pa.field("id", pa.int64()))
    writer.write(pa.array([1], pa.int64()), np.zeros((1, 2), np.float32))
    assert all_files(tmp_path)  # the temporary file exists while writing
    writer.abort()
    with pytest.raises(RuntimeError):
        with UnitWriter(tmp_path, "u", 2, "float32", pa.field("id", pa.int64())) as writer:
            writer.write(pa.array([1], pa.int64()), np.zeros((1, 2), np.float32))
            raise RuntimeError("engine failed")
    assert all_files(tmp_path) == []


def test_safe_names_are_unique_and_readable():
    assert safe_name("a/b.parquet#rg0-4") != safe_name("a_b.parquet#rg0-4")
    assert safe_name("a/b.parquet#rg0-4").startswith("a_b.parquet_rg0-4-")
    assert len(safe_name("x" * 1000)) < 200


def test_rejected_rows_round_trip_in_the_inputs_id_type(tmp_path):
    """Ids keep their type (rejected.parquet stored every id as a string), promoted across units as the
    index's ids are; ids of no common type, which a job refuses, come back as strings."""
    assert read_rejected(tmp_path).num_rows == 0
    with RejectedWriter(tmp_path, "a#rg0-1") as writer:
        writer.write(pa.array([1, 2], pa.int64()), ["empty", "null"])
    with RejectedWriter(tmp_path, "b#rg0-1") as writer:
        writer.write(pa.array([7], pa.int32()), ["whitespace"])
    table = read_rejected(tmp_path).sort_by("id")
    assert table.schema.field("id").type == pa.int64()
    assert table.to_pydict() == {"id": [1, 2, 7], "unit_id": ["a#rg0-1", "a#rg0-1", "b#rg0-1"],
                                 "reason": ["empty", "null", "whitespace"]}
    with RejectedWriter(tmp_path, "c#rg0-1") as writer:
        writer.write(pa.array(["x"]), ["whitespace"])
    assert sorted(read_rejected(tmp_path).column("id").to_pylist()) == ["1", "2", "7", "x"]


def test_rejected_writer_without_rows_clears_a_stale_file(tmp_path):
    with RejectedWriter(tmp_path, "a") as writer:
        writer.write(pa.array(["1"]), ["empty"])
    with RejectedWriter(tmp_path, "a"):
        pass
    assert read_rejected(tmp_path).num_rows == 0
    with pytest.raises(RuntimeError):
        with RejectedWriter(tmp_path, "b") as writer:
            writer.write(pa.array(["1"]), ["empty"])
            raise RuntimeError
    assert all_files(tmp_path) == []


def test_embeddings_are_written_plain_and_other_columns_as_by_default(tmp_path):
    """No dictionary, compression or statistics on the vectors (they cost 10x the write); the rest keep them."""
    kept = [pa.field("tags", pa.list_(pa.string())), pa.field("text", pa.string())]
    with UnitWriter(tmp_path, "u", 4, "float32", pa.field("id", pa.int64()), kept) as writer:
        writer.write(pa.array([1, 2]), np.ones((2, 4), np.float32), [pa.array([["a"], ["b"]]), pa.array(["x", "y"])])
    row_group = pq.ParquetFile(writer.path).metadata.row_group(0)
    columns = {row_group.column(i).path_in_schema: row_group.column(i) for i in range(row_group.num_columns)}
    assert set(columns) == {"id", "embedding.list.element", "tags.list.element", "text"}
    for path, column in columns.items():
        plain = path == "embedding.list.element"
        assert (column.compression == "UNCOMPRESSED") == plain, path
        assert ("RLE_DICTIONARY" not in column.encodings) == plain, path
        assert column.is_stats_set != plain, path


def _embedding_bytes(path) -> int:
    meta = pq.ParquetFile(path).metadata
    return sum(meta.row_group(g).column(c).total_compressed_size for g in range(meta.num_row_groups)
               for c in range(meta.num_columns) if meta.row_group(g).column(c).path_in_schema.startswith("embedding"))


def test_int8_and_binary_files_are_at_least_3_5x_smaller_than_float32_and_decode_equal(tmp_path, minilm, texts):
    """Parquet stores int8 / uint8 as INT32: uncompressed, an int8 file was as large as float32. Real
    MiniLM vectors, quantised as the engine does (output_dtypes, held equal to the Pooler)."""
    from embedpipe.kernels.output_dtypes import OUTPUT_DTYPES
    from embedpipe.pipeline.batching.embed import embed_texts
    from embedpipe.pipeline.text.tokenizer import make_tokenizer

    vectors = embed_texts(minilm, make_tokenizer(minilm), texts)  # [240, 384] float32, normalised
    sizes, raw = {}, {}
    for name in ("float32", "int8", "binary"):
        stored = OUTPUT_DTYPES[name].quantise(vectors)
        with UnitWriter(tmp_path / name, "u", stored.shape[1], name, pa.field("id", pa.int64())) as writer:
            writer.write(pa.array(range(len(stored)), pa.int64()), stored)
        decoded = pq.read_table(writer.path).column("embedding").combine_chunks().flatten().to_numpy()
        np.testing.assert_array_equal(decoded.reshape(stored.shape), stored)
        sizes[name], raw[name] = _embedding_bytes(writer.path), stored.nbytes
    assert sizes["float32"] / sizes["int8"] >= 3.5 and sizes["float32"] / sizes["binary"] >= 3.5, sizes
    assert sizes["int8"] <= 1.1 * raw["int8"] and sizes["binary"] <= 1.5 * raw["binary"], (sizes, raw)
