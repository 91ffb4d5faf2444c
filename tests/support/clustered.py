"""Vectors with neighbourhoods, as embeddings have (uniform random vectors in many dimensions have none)."""
import numpy as np


def clustered_vectors(num_rows: int, dim: int, num_clusters: int = 40, spread: float = 0.35, seed: int = 0):
    """[num_rows, dim] float32, L2-normalised, around num_clusters random centres."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((num_clusters, dim))
    vectors = centres[rng.integers(0, num_clusters, num_rows)] + spread * rng.standard_normal((num_rows, dim))
    vectors = vectors.astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
