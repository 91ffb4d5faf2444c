"""int8, binary and Matryoshka outputs against independent computations from float32 vectors."""
import numpy as np
import pytest

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.output_dtypes import OUTPUT_DTYPES
from embedpipe.pipeline.text.tokenizer import make_tokenizer


@pytest.fixture(scope="module")
def sequences(texts, minilm):
    return make_tokenizer(minilm).encode(texts[:64])[0]


@pytest.fixture(scope="module")
def raw(sequences):
    """Pooled, unnormalised float32 vectors."""
    engine = Engine(EngineConfig(device="cpu", normalize=False))
    return engine.step(pack(sequences, BucketPolicy())).result().numpy()


def _run(sequences, **overrides):
    engine = Engine(EngineConfig(device="cpu", **overrides))
    return engine.step(pack(sequences, BucketPolicy())).result().numpy()


def test_default_output_is_unit_norm(sequences, raw):
    out = _run(sequences)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(out, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_matryoshka_slices_then_normalizes(sequences, raw):
    out = _run(sequences, dim=128)
    cut = raw[:, :128]
    assert out.shape == (len(sequences), 128)
    np.testing.assert_allclose(out, cut / np.linalg.norm(cut, axis=1, keepdims=True), atol=1e-6)


def test_int8_is_round_tanh_times_127(sequences, raw):
    out = _run(sequences, normalize=False, output_dtype="int8")
    expected = np.round(np.tanh(raw.astype(np.float64)) * 127).astype(np.int8)  # numpy rounds half to even
    assert out.dtype == np.int8 and out.shape == raw.shape
    assert np.abs(out.astype(int) - expected).max() <= 1
    assert (out == expected).mean() >= 0.999


def test_binary_packs_sign_bits(sequences, raw):
    out = _run(sequences, normalize=False, output_dtype="binary")
    assert out.dtype == np.uint8 and out.shape == (len(sequences), raw.shape[1] // 8)
    np.testing.assert_array_equal(out, np.packbits(raw >= 0, axis=1))


def test_binary_matryoshka_and_float16(sequences, raw):
    out = _run(sequences, dim=64, output_dtype="binary")
    np.testing.assert_array_equal(out, np.packbits(raw[:, :64] >= 0, axis=1))
    half = _run(sequences, output_dtype="float16")
    assert half.dtype == np.float16
    np.testing.assert_allclose(half, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=2e-3)


def test_bad_output_settings_are_rejected():
    with pytest.raises(ValueError, match="larger than the model's hidden size"):
        Engine(EngineConfig(device="cpu", dim=1000))
    with pytest.raises(ValueError, match="multiple of 8"):
        Engine(EngineConfig(device="cpu", dim=100, output_dtype="binary"))
    with pytest.raises(ValueError, match="output dtype"):
        EngineConfig(output_dtype="bfloat16")


@pytest.mark.parametrize("name", list(OUTPUT_DTYPES))
def test_the_numpy_quantiser_stores_what_the_pooler_stores(sequences, name):
    """output_dtypes' quantise (the server's queries against an int8 / binary index) against the Pooler,
    from the same pooled, truncated, normalised float32 vectors; the table's width and dtype are the engine's."""
    pooled = _run(sequences, dim=128)
    engine = Engine(EngineConfig(device="cpu", dim=128, output_dtype=name))
    stored = engine.step(pack(sequences, BucketPolicy())).result().numpy()
    ours = OUTPUT_DTYPES[name].quantise(pooled)
    assert ours.dtype == stored.dtype == engine.output.numpy_dtype
    assert ours.shape == stored.shape == (len(sequences), engine.output.width)
    if name == "int8":  # torch's and numpy's tanh may differ in the last bit, which can move a round
        assert np.abs(ours.astype(int) - stored).max() <= 1 and (ours == stored).mean() >= 0.999
    else:
        np.testing.assert_array_equal(ours, stored)
