"""Packing and padding never change a sequence's embedding."""
import numpy as np
import pytest

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.testing.random_model import write_random_model


def _alone_and_packed(engine, seed=0):
    rng = np.random.default_rng(seed)
    others = [rng.integers(1000, 30000, size=n).tolist() for n in rng.integers(1, 200, size=50)]
    target = rng.integers(1000, 30000, size=37).tolist()
    alone = engine.step(pack([target])).result()[0]
    position = 23
    batch = others[:position] + [target] + others[position:]
    packed = engine.step(pack(batch, BucketPolicy())).result()[position]
    return alone.numpy(), packed.numpy()


def test_minilm_alone_equals_packed_among_50(minilm):
    alone, packed = _alone_and_packed(minilm)
    assert np.abs(alone - packed).max() <= 1e-5


@pytest.mark.parametrize("shape", ["tiny-xlm-roberta", "tiny-qwen3", "tiny-qwen3-bidirectional"])
def test_random_models_alone_equals_packed_among_50(tmp_path, shape):
    write_random_model(shape, tmp_path)
    alone, packed = _alone_and_packed(Engine(EngineConfig(model=str(tmp_path), device="cpu")))
    assert np.abs(alone - packed).max() <= 1e-5


def test_padding_tokens_do_not_leak(minilm):
    """The same batch padded to two different buckets gives identical vectors."""
    sequences = [[101, 2000 + i, 3000 + i, 102] for i in range(5)]
    tight = minilm.step(pack(sequences)).result()
    padded = minilm.step(pack(sequences, BucketPolicy(small_token_step=512, large_token_step=512,
                                                      large_token_threshold=1024))).result()
    assert pack(sequences, BucketPolicy(small_token_step=512, large_token_step=512,
                                        large_token_threshold=1024)).key == (512, 8)
    np.testing.assert_allclose(tight.numpy(), padded.numpy(), atol=1e-6)
