"""The benchmarks' peers (benchmarks/common.py) compute what our engine computes, on the CPU in float32:
a precondition of every comparison the benchmarks make (they check it again on the GPU before timing)."""
import sys

import numpy as np
import pytest

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.text.tokenizer import make_tokenizer

from support.paths import REPO
from support.numerics import cosine

sys.path.insert(0, str(REPO / "benchmarks"))
from common import SentenceTransformersPeer, TransformersPeer  # noqa: E402

TEXTS = ["short", "a somewhat longer text that needs more tokens than the first one", "mid-sized text here"]


@pytest.mark.parametrize("shape", ["tiny-bert", "tiny-qwen3", "tiny-qwen3-bidirectional"])
def test_peers_agree_with_the_engine(tmp_path, shape):
    """Token ids (both peers, padded batches of mixed lengths) and texts (sentence-transformers' encode)."""
    write_random_model(shape, tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu"))
    rng = np.random.default_rng(0)
    sequences = [rng.integers(1000, 30000, size=n).tolist() for n in (3, 40, 17, 64)]
    ours = engine.step(pack(sequences, BucketPolicy())).result()
    transformers_peer = TransformersPeer(tmp_path, engine.output.pooling, "cpu")
    st_peer = SentenceTransformersPeer(tmp_path, "cpu")
    assert cosine(ours, transformers_peer(sequences)).min() >= 0.9999
    assert cosine(ours, st_peer(sequences)).min() >= 0.9999
    assert cosine(embed_texts(engine, make_tokenizer(engine), TEXTS), st_peer.encode(TEXTS)).min() >= 0.9999


@pytest.mark.parametrize("shape", ["tiny-bert", "tiny-qwen3", "tiny-qwen3-bidirectional"])
def test_user_script_agrees_with_the_engine(tmp_path, shape):
    """Suite 5's script (st_index.py): SentenceTransformer.encode as a user calls it, with pplx-embed's full
    attention for a bidirectional folder, gives our engine's vectors."""
    import torch
    from sentence_transformers import SentenceTransformer

    from st_index import full_attention
    write_random_model(shape, tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu"))
    model = SentenceTransformer(str(tmp_path), device="cpu", model_kwargs={"torch_dtype": torch.float32})
    if "bidirectional" in shape:
        full_attention(model)
    vectors = model.encode(TEXTS, batch_size=2, normalize_embeddings=True)
    assert cosine(embed_texts(engine, make_tokenizer(engine), TEXTS), vectors).min() >= 0.9999
