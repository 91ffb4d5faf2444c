"""Comparing embeddings."""
import torch


def cosine(a, b):
    """Row-wise cosine similarity of two [n, dim] arrays or tensors, in float64."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)
