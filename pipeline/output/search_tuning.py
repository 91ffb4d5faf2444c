"""The search parameters an approximate index is written with, chosen for recall against exact search.

FAISS writes an IVF index's nprobe and an HNSW index's efSearch into index.faiss, and a user who
loads it with faiss.read_index searches with them: written at FAISS's defaults (nprobe 1,
efSearch 16), IVF32,PQ16 gave recall@10 0.746 where nprobe 16 gave 0.841. Here the smallest
value whose recall@10 reaches TARGET_RECALL is chosen, on up to SAMPLE_QUERIES of the indexed
vectors as queries, leave-one-out (each query's own row is left out of both neighbour lists, so
finding itself earns nothing), against their exact neighbours found in the same pass that adds the
vectors to the index. index.json records the choice and the recall it reached; when no candidate
reaches the target (a coarse PQ code), the largest is kept and the recall says so.
"""
from __future__ import annotations

import numpy as np

TARGET_RECALL = 0.95
K = 10
SAMPLE_QUERIES = 200
QUERY_SEED = 1
NPROBES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
EF_SEARCHES = (16, 32, 64, 128, 256, 512, 1024)


def search_parameter(index) -> tuple[str, list[int]] | None:
    """("nprobe" | "efSearch", the candidates) of a float index that has one; None for Flat and the rest."""
    import faiss

    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return "nprobe", [n for n in NPROBES if n < ivf.nlist] + [ivf.nlist]
    if isinstance(index, faiss.IndexHNSW):
        return "efSearch", list(EF_SEARCHES)
    return None


def query_rows(num_rows: int) -> np.ndarray:
    """The sorted row numbers (FAISS ids) of the sample queries, with a fixed seed."""
    rng = np.random.default_rng(QUERY_SEED)
    return np.sort(rng.choice(num_rows, size=min(SAMPLE_QUERIES, num_rows), replace=False))


class ExactNeighbours:
    """The exact top K+1 inner products of the queries [q, d] over vectors streamed in FAISS id order."""

    def __init__(self, queries: np.ndarray):
        import faiss

        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.heap = faiss.ResultHeap(len(queries), K + 1, keep_max=True)
        self.offset = 0

    def add(self, vectors: np.ndarray) -> None:
        scores = self.queries @ vectors.T  # [q, n]
        ids = np.broadcast_to(np.arange(self.offset, self.offset + len(vectors), dtype=np.int64), scores.shape)
        self.heap.add_result(np.ascontiguousarray(scores), np.ascontiguousarray(ids))
        self.offset += len(vectors)

    def labels(self) -> np.ndarray:
        self.heap.finalize()
        return self.heap.I  # [q, K + 1], best first


def tune(index, queries: np.ndarray, query_ids: np.ndarray, exact: np.ndarray) -> dict | None:
    """Sets the smallest candidate of the index's search parameter that reaches TARGET_RECALL (else the
    largest); returns {parameter: value, "recall_at_10": ..., "queries": q} for index.json, or None."""
    import faiss

    found = search_parameter(index)
    if found is None or not len(queries):
        return None
    name, candidates = found
    space = faiss.ParameterSpace()
    for value in candidates:
        space.set_index_parameter(index, name, value)
        _, labels = index.search(np.ascontiguousarray(queries, dtype=np.float32), K + 1)
        reached = recall(labels, exact, query_ids)
        if reached >= TARGET_RECALL:
            break
    return {name: value, "recall_at_10": round(reached, 4), "queries": len(queries), "target": TARGET_RECALL}


def recall(found: np.ndarray, exact: np.ndarray, query_ids: np.ndarray) -> float:
    """Mean over queries of |found top K ∩ exact top K| / K, each query's own id left out of both."""
    total = 0
    for own, got, want in zip(query_ids, found, exact):
        got = [i for i in got if i != own and i >= 0][:K]
        want = [i for i in want if i != own][:K]
        total += len(set(got) & set(want)) / max(len(want), 1)
    return total / len(query_ids)
