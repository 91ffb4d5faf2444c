from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from embedpipe.pipeline.inputs.column_types import ColumnTypeChange
from embedpipe.pipeline.output.faiss_index import SearchIndex, build_index
from support.outputs import write_unit, write_units


def unit_vectors(num_rows, dim, seed=0):
    vectors = np.random.default_rng(seed).standard_normal((num_rows, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def self_hits(search, queries, k=1):
    return [hits[0]["id"] for hits in search.search(queries, k)]


@pytest.mark.parametrize("dtype_name", ["float32", "float16"])
def test_flat_index_finds_every_row_itself(tmp_path, dtype_name):
    vectors = unit_vectors(300, 16).astype(dtype_name)
    write_units(tmp_path / "out", vectors, 128, dtype_name)
    meta = build_index([tmp_path / "out"], tmp_path / "index", extra_meta={"model": "m"})
    assert meta == json.loads((tmp_path / "index" / "index.json").read_text())
    assert (meta["metric"], meta["dimension"], meta["dtype"], meta["num_rows"]) == \
        ("inner_product", 16, dtype_name, 300)
    assert meta["model"] == "m" and meta["embedpipe_version"]
    search = SearchIndex.load(tmp_path / "index")
    assert self_hits(search, vectors) == list(range(300))
    assert search.search(vectors[:1], 3)[0][0]["score"] == pytest.approx(1.0, abs=1e-2)


def test_unnormalized_vectors_get_a_cosine_index(tmp_path):
    vectors = unit_vectors(100, 8) * np.linspace(1, 50, 100, dtype=np.float32)[:, None]
    write_units(tmp_path / "out", vectors, 100)
    assert build_index([tmp_path / "out"], tmp_path / "index", normalized=False)["metric"] == "cosine"
    search = SearchIndex.load(tmp_path / "index")
    assert self_hits(search, vectors * 3) == list(range(100))
    assert search.search(vectors[:1], 1)[0][0]["score"] == pytest.approx(1.0, abs=1e-5)


def test_ivf_pq_index_is_trained_and_recalls_itself(tmp_path):
    vectors = unit_vectors(2000, 32)
    write_units(tmp_path / "out", vectors, 500)
    meta = build_index([tmp_path / "out"], tmp_path / "index", factory="IVF16,PQ8x4", train_size=1000)
    assert meta["factory"] == "IVF16,PQ8x4"
    search = SearchIndex.load(tmp_path / "index", nprobe=16)
    recall = np.mean(np.array(self_hits(search, vectors)) == np.arange(2000))
    assert recall >= 0.9


def test_rejected_factory_is_named(tmp_path):
    write_units(tmp_path / "out", unit_vectors(10, 8), 10)
    with pytest.raises(ValueError, match="NoSuchIndex7"):
        build_index([tmp_path / "out"], tmp_path / "index", factory="NoSuchIndex7")


def test_two_output_folders_merge_in_unit_order(tmp_path):
    vectors = unit_vectors(40, 8)
    write_unit(tmp_path / "out1", "b#rg0-1", list(range(20, 40)), vectors[20:])
    write_unit(tmp_path / "out2", "a#rg0-1", list(range(20)), vectors[:20])
    for order in ([tmp_path / "out1", tmp_path / "out2"], [tmp_path / "out2", tmp_path / "out1"]):
        build_index(order, tmp_path / "index")
        ids = pq.read_table(tmp_path / "index" / "index_ids.parquet").column("doc")
        assert ids.to_pylist() == list(range(40))
        assert self_hits(SearchIndex.load(tmp_path / "index"), vectors) == list(range(40))


def test_binary_index_uses_hamming(tmp_path):
    codes = np.random.default_rng(0).integers(0, 256, (200, 8), dtype=np.uint8)
    write_units(tmp_path / "out", codes, 64, "binary")
    meta = build_index([tmp_path / "out"], tmp_path / "index")
    assert (meta["metric"], meta["dimension"], meta["factory"]) == ("hamming", 64, "BFlat")
    search = SearchIndex.load(tmp_path / "index")
    assert self_hits(search, codes) == list(range(200))
    flipped = codes[:1].copy()
    flipped[0, 0] ^= 0b111
    assert search.search(flipped, 1)[0][0]["score"] == 61  # 64 bits, 3 differ


def test_duplicate_ids_are_kept_and_counted(tmp_path):
    vectors = unit_vectors(4, 4)
    write_unit(tmp_path / "out", "a", [1, 2], vectors[:2])
    write_unit(tmp_path / "out", "b", [3, 2], vectors[2:])
    meta = build_index([tmp_path / "out"], tmp_path / "index")
    assert (meta["num_rows"], meta["duplicate_ids"]) == (4, 1)
    search = SearchIndex.load(tmp_path / "index")
    assert self_hits(search, vectors) == [1, 2, 3, 2]  # both rows of id 2, each its own nearest


def test_a_unit_done_in_two_outputs_is_not_indexed_twice(tmp_path):
    for output in ("out1", "out2"):
        write_unit(tmp_path / output, "a#rg0-1", [1, 2], unit_vectors(2, 4))
    with pytest.raises(ValueError, match=r"unit 'a#rg0-1' is done in two outputs, .*out1.* and .*out2"):
        build_index([tmp_path / "out1", tmp_path / "out2"], tmp_path / "index")


def test_id_types_are_promoted_across_units_and_empty_units_have_no_say(tmp_path):
    vectors = unit_vectors(4, 4)
    write_unit(tmp_path / "out", "a", pa.array([1, 2], pa.int32()), vectors[:2])
    write_unit(tmp_path / "out", "b", pa.array([], pa.string()), vectors[:0])
    write_unit(tmp_path / "out", "c", pa.array([3, 4], pa.int64()), vectors[2:])
    assert build_index([tmp_path / "out"], tmp_path / "index")["num_rows"] == 4
    ids = pq.read_table(tmp_path / "index" / "index_ids.parquet").column("doc")
    assert ids.type == pa.int64() and ids.to_pylist() == [1, 2, 3, 4]
    write_unit(tmp_path / "out", "d", pa.array(["5"], pa.string()), vectors[:1])
    with pytest.raises(ColumnTypeChange, match=r"d.*column 'doc' is string here but int64"):
        build_index([tmp_path / "out"], tmp_path / "index")


def test_search_returns_kept_columns(tmp_path):
    vectors = unit_vectors(3, 4)
    kept = {"title": ["x", "y", "z"], "year": [2001, 2002, 2003]}
    write_unit(tmp_path / "out", "a", ["d0", "d1", "d2"], vectors, kept=kept)
    build_index([tmp_path / "out"], tmp_path / "index")
    hits = SearchIndex.load(tmp_path / "index").search(vectors[1], 5)
    assert len(hits) == 1 and len(hits[0]) == 3
    best = hits[0][0]
    assert (best["id"], best["title"], best["year"]) == ("d1", "y", 2002)


@pytest.mark.parametrize("dtype_name,normalized", [("float32", True), ("float16", True), ("int8", False)])
def test_vectors_held_in_memory_build_the_index_the_files_build(tmp_path, dtype_name, normalized):
    """The job hands build_index the vectors it wrote (some units, in row groups): same index, byte for byte."""
    import faiss

    vectors = unit_vectors(700, 16)
    vectors = np.round(vectors * 127).astype(np.int8) if dtype_name == "int8" else vectors.astype(dtype_name)
    write_units(tmp_path / "out", vectors, 256, dtype_name)
    files = sorted((tmp_path / "out" / "embeddings").glob("*.parquet"))
    in_memory = {files[0]: [vectors[:100], vectors[100:256]], files[2]: [vectors[512:]]}  # units 0 and 2
    build_index([tmp_path / "out"], tmp_path / "from-files", normalized=normalized)
    build_index([tmp_path / "out"], tmp_path / "from-memory", normalized=normalized, in_memory=in_memory)
    for name in ("index_ids.parquet", "index.json"):
        assert (tmp_path / "from-files" / name).read_bytes() == (tmp_path / "from-memory" / name).read_bytes()
    ours, theirs = (faiss.read_index(str(tmp_path / folder / "index.faiss"))
                    for folder in ("from-memory", "from-files"))
    assert ours.ntotal == theirs.ntotal == 700
    assert np.array_equal(ours.reconstruct_n(0, 700), theirs.reconstruct_n(0, 700))


def test_build_index_takes_a_units_vectors_from_memory_when_given(tmp_path):
    vectors = unit_vectors(300, 16)
    write_units(tmp_path / "out", vectors, 200)
    first = sorted((tmp_path / "out" / "embeddings").glob("*.parquet"))[0]
    build_index([tmp_path / "out"], tmp_path / "index", in_memory={first: [np.zeros((200, 16), np.float32)]})
    index = SearchIndex.load(tmp_path / "index").index
    assert not index.reconstruct_n(0, 200).any() and np.array_equal(index.reconstruct_n(200, 100), vectors[200:])


@pytest.mark.parametrize("dtype_name,normalized", [("float32", True), ("float16", True), ("float32", False)])
def test_a_flat_index_file_holds_the_bytes_faiss_writes(tmp_path, dtype_name, normalized):
    """build_index streams a Flat index to its file itself: the file is faiss.write_index's, byte for byte."""
    import faiss

    vectors = (unit_vectors(500, 24) * (1 if normalized else 3.0)).astype(dtype_name)
    write_units(tmp_path / "out", vectors, 200, dtype_name)
    build_index([tmp_path / "out"], tmp_path / "index", normalized=normalized)
    expected = faiss.IndexFlatIP(24)
    reference = vectors.astype(np.float32)
    if not normalized:  # a cosine index holds the vectors L2-normalised
        faiss.normalize_L2(reference)
    expected.add(reference)
    faiss.write_index(expected, str(tmp_path / "faiss.index"))
    assert (tmp_path / "index" / "index.faiss").read_bytes() == (tmp_path / "faiss.index").read_bytes()


def test_vectors_that_do_not_match_their_ids_leave_no_index(tmp_path):
    vectors = unit_vectors(300, 16)
    write_units(tmp_path / "out", vectors, 200)
    first = sorted((tmp_path / "out" / "embeddings").glob("*.parquet"))[0]
    with pytest.raises(ValueError, match="hold 250 vectors, their ids 300"):
        build_index([tmp_path / "out"], tmp_path / "index", in_memory={first: [vectors[:150]]})
    assert not [path.name for path in (tmp_path / "index").iterdir()]  # no index, ids or temporary file
