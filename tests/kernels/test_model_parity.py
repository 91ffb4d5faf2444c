"""Our ragged models against the float32 references: sentence-transformers and transformers."""
import numpy as np
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.text.tokenizer import make_tokenizer

from support.numerics import cosine
from support.reference import reference_embeddings


def test_minilm_matches_sentence_transformers(minilm, minilm_reference, texts):
    ours = embed_texts(minilm, make_tokenizer(minilm), texts)
    ref = minilm_reference.encode(texts, batch_size=32, convert_to_numpy=True)
    cos = cosine(ours, ref)
    worst = int(cos.argmin())
    assert cos.min() >= 0.9999, f"text {worst} {texts[worst][:60]!r}: cosine {cos[worst]:.6f}"
    assert len(texts) >= 200


def test_minilm_truncates_like_sentence_transformers(minilm, minilm_reference, texts):
    tokenizer = make_tokenizer(minilm)
    ids, truncated = tokenizer.encode(texts)
    assert sum(truncated) >= 3, "the corpus must hold texts longer than max_seq_length"
    assert max(map(len, ids)) == minilm.folder.max_seq_length == minilm_reference.max_seq_length


@pytest.mark.parametrize("shape,pooling,normalize,bidirectional", [
    ("tiny-bert", "mean", True, False),
    ("tiny-xlm-roberta", "cls", True, False),
    ("tiny-qwen3", "lasttoken", True, False),
    ("tiny-qwen3-bidirectional", "mean", False, True),
])
def test_random_weight_models_match_transformers(tmp_path, shape, pooling, normalize, bidirectional):
    reference = write_random_model(shape, tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu"))
    assert (engine.output.pooling, engine.output.normalize) == (pooling, normalize)
    rng = np.random.default_rng(0)
    sequences = [rng.integers(1000, 30000, size=n).tolist() for n in rng.integers(1, 120, size=40)]
    ours = engine.step(pack(sequences, BucketPolicy())).result()
    ref = reference_embeddings(reference, sequences, pooling, normalize, bidirectional)
    cos = cosine(ours, ref)
    assert cos.min() >= 0.9999, f"{shape}: worst cosine {cos.min():.6f}"
    if not normalize:
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)

