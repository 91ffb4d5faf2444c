"""Approximate indexes are written with the nprobe / efSearch that reaches recall@10 >= 0.95 against exact
search, so faiss.read_index users search as well as `query` does; --nprobe / --ef-search override it."""
from __future__ import annotations

import faiss
import numpy as np
import pytest

from embedpipe.pipeline.output.faiss_index import SearchIndex, build_index
from embedpipe.pipeline.output.search_tuning import TARGET_RECALL
from support.clustered import clustered_vectors
from support.outputs import write_units


def exact_recall_at_10(index, vectors: np.ndarray, queries: np.ndarray) -> float:
    """Recomputed here, by brute force over every vector, leave-one-out."""
    exact = np.argsort(-(vectors[queries] @ vectors.T), axis=1)[:, :11]
    _, found = index.search(vectors[queries], 11)
    hits = [len(set(f[f != q][:10]) & set(e[e != q][:10])) / 10 for q, f, e in zip(queries, found, exact)]
    return float(np.mean(hits))


# data on which FAISS's defaults (nprobe 1, efSearch 16) fall short of the target
@pytest.mark.parametrize("factory, parameter, num_clusters", [("IVF32,Flat", "nprobe", 400),
                                                              ("HNSW8", "efSearch", 1000)])
def test_the_written_index_searches_with_the_parameter_that_reaches_the_target(tmp_path, factory, parameter,
                                                                               num_clusters):
    vectors = clustered_vectors(3000, 32, num_clusters, spread=1.0)
    write_units(tmp_path / "out", vectors, 1000)
    meta = build_index([tmp_path / "out"], tmp_path / "index", factory=factory, train_size=3000)
    chosen = meta["search"]
    assert set(chosen) == {parameter, "recall_at_10", "queries", "target"} and chosen["queries"] == 200
    index = faiss.read_index(str(tmp_path / "index" / "index.faiss"))  # as a user outside embedpipe loads it
    if parameter == "nprobe":
        assert faiss.extract_index_ivf(index).nprobe == chosen["nprobe"] > 1
    else:
        assert index.hnsw.efSearch == chosen["efSearch"] > 16
    queries = np.random.default_rng(7).choice(len(vectors), 300, replace=False)
    assert exact_recall_at_10(index, vectors, queries) >= TARGET_RECALL - 0.03  # other queries than the tuning's
    assert chosen["recall_at_10"] >= TARGET_RECALL


def test_a_coarse_index_keeps_the_largest_candidate_and_says_what_it_reached(tmp_path):
    vectors = clustered_vectors(2000, 32, 400, spread=1.0)
    write_units(tmp_path / "out", vectors, 1000)
    meta = build_index([tmp_path / "out"], tmp_path / "index", factory="IVF8,PQ4x4", train_size=2000)
    assert meta["search"]["nprobe"] == 8 and meta["search"]["recall_at_10"] < TARGET_RECALL


def test_flat_indexes_have_nothing_to_tune_and_search_parameters_override(tmp_path):
    vectors = clustered_vectors(1500, 16)
    write_units(tmp_path / "out", vectors, 1500)
    assert "search" not in build_index([tmp_path / "out"], tmp_path / "flat")
    build_index([tmp_path / "out"], tmp_path / "ivf", factory="IVF16,Flat", train_size=1500)
    search = SearchIndex.load(tmp_path / "ivf", nprobe=3)
    assert faiss.extract_index_ivf(search.index).nprobe == 3
    with pytest.raises(ValueError, match="nprobe must be positive"):
        SearchIndex.load(tmp_path / "ivf", nprobe=0)
