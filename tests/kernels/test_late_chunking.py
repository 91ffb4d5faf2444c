"""Late chunking (a Batch's spans): each window's vector is the model's pooling over the window's tokens, from
one forward pass of the whole document. Against transformers in float32, the same however the batch is packed,
stored in every output dtype as the Pooler stores a sequence's vector, and refused for CLS models."""
import numpy as np
import pytest
import torch
import transformers

from embedpipe.kernels.batch import BucketPolicy, pack, split_in_halves
from embedpipe.kernels.engine import Engine, EngineConfig, model_spec
from embedpipe.kernels.models.model_folder import builtin_models
from embedpipe.kernels.output_dtypes import OUTPUT_DTYPES
from embedpipe.kernels.testing.random_model import write_random_model

from support.late_chunking import random_documents, reference_span_embeddings, windows
from support.numerics import cosine

WIDE_BUCKETS = BucketPolicy(small_token_step=512, large_token_step=512, large_token_threshold=1024)


def _spans_of(documents):
    return [windows(len(d)) for d in documents]


def _check_against_reference(engine, reference, documents, bidirectional=False):
    """All documents in one bucketed batch; each document's span rows against its own reference."""
    spans = _spans_of(documents)
    rows = engine.step(pack(documents, BucketPolicy(), spans=spans)).result()
    assert rows.shape == (sum(map(len, spans)), engine.output.width)
    out = engine.output
    want = torch.cat([reference_span_embeddings(reference, d, s, out.pooling, out.normalize, bidirectional, out.dim)
                      for d, s in zip(documents, spans)])
    cos = cosine(rows, want)
    assert cos.min() >= 0.9999, f"worst span {int(cos.argmin())}: cosine {cos.min():.6f}"
    assert cosine(rows[1:], want[:-1]).min() < 0.9999  # so rows one place off would fail
    if not out.normalize:
        torch.testing.assert_close(rows, want, rtol=1e-4, atol=1e-4)


def test_minilm_spans_match_transformers(minilm):
    reference = transformers.AutoModel.from_pretrained(builtin_models()["minilm"]).eval()
    _check_against_reference(minilm, reference, random_documents(0, [512, 300, 97, 5]))


@pytest.mark.parametrize("shape,pooling,bidirectional", [
    ("tiny-bert", None, False),
    ("tiny-xlm-roberta", "mean", False),  # a CLS model, pooled by mean on request
    ("tiny-qwen3", None, False),  # causal, last token
    ("tiny-qwen3-bidirectional", None, True),  # pplx-embed's kind: mean, not normalised
])
def test_random_weight_spans_match_transformers(tmp_path, shape, pooling, bidirectional):
    reference = write_random_model(shape, tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu", pooling=pooling))
    lengths = [1500, 700, 64, 3] if shape.startswith("tiny-qwen3") else [510, 300, 64, 3]
    _check_against_reference(engine, reference, random_documents(1, lengths), bidirectional)


def test_matryoshka_spans_match_transformers(tmp_path):
    reference = write_random_model("tiny-qwen3", tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cpu", dim=32))
    _check_against_reference(engine, reference, random_documents(2, [400, 90]))


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    write_random_model("tiny-qwen3", folder)
    return Engine(EngineConfig(model=str(folder), device="cpu"))


@pytest.mark.parametrize("model", ["minilm", "tiny_qwen3"])
def test_span_rows_do_not_depend_on_packing(request, model):
    """A document's span rows alone, among others (before and after it), padded to other buckets, and after
    the OOM split (its halves' rows one after the other) are the same."""
    engine = request.getfixturevalue(model)
    documents = random_documents(3, [200, 17, 450, 80, 333, 9])
    target, position = documents[2], 2
    spans = _spans_of(documents)
    first_row = sum(map(len, spans[:position]))
    alone = engine.step(pack([target], spans=[spans[position]])).result()
    results = {"packed": engine.step(pack(documents, BucketPolicy(), spans=spans)).result(),
               "wide buckets": engine.step(pack(documents, WIDE_BUCKETS, spans=spans)).result(),
               "split": torch.cat([engine.step(h).result()
                                   for h in split_in_halves(pack(documents, BucketPolicy(), spans=spans))])}
    for name, rows in results.items():
        assert rows.shape[0] == sum(map(len, spans)), name
        got = rows[first_row:first_row + len(spans[position])]
        assert (got - alone).abs().max() <= 1e-5, name
    assert (results["split"] - results["packed"]).abs().max() <= 1e-5


@pytest.mark.parametrize("model", ["minilm", "tiny_qwen3"])
def test_a_span_over_a_whole_sequence_is_the_sequences_vector(request, model):
    """Late chunking pools as the Pooler pools a sequence: a span of all its tokens gives its vector."""
    engine = request.getfixturevalue(model)
    documents = random_documents(4, [120, 33, 7])
    spans = [[(0, len(d))] for d in documents]
    whole = engine.step(pack(documents, BucketPolicy())).result()
    torch.testing.assert_close(engine.step(pack(documents, BucketPolicy(), spans=spans)).result(), whole,
                               atol=1e-5, rtol=0)


def _span_rows(documents, **config):
    engine = Engine(EngineConfig(device="cpu", **config))
    return engine, engine.step(pack(documents, BucketPolicy(), spans=_spans_of(documents))).result().numpy()


@pytest.mark.parametrize("name", ["float16", "int8", "binary"])
def test_span_rows_are_stored_as_the_pooler_stores_vectors(name):
    """The same pooled, truncated, normalised float32 span vectors, quantised by output_dtypes' table (which
    test_output_dtypes holds equal to the Pooler's), and a whole-sequence span as the sequence's own row."""
    documents = random_documents(5, [300, 60])
    _, pooled = _span_rows(documents, dim=128)
    engine, stored = _span_rows(documents, dim=128, output_dtype=name)
    ours = OUTPUT_DTYPES[name].quantise(pooled)
    assert ours.dtype == stored.dtype == engine.output.numpy_dtype
    assert ours.shape == stored.shape == (pooled.shape[0], engine.output.width)
    sequences = engine.step(pack(documents, BucketPolicy())).result().numpy()
    whole = stored[[len(windows(300)) - 1, len(windows(300)) + len(windows(60)) - 1]]  # each (0, length) span
    if name == "int8":  # torch's and numpy's tanh may differ in the last bit, which can move a round
        assert np.abs(ours.astype(int) - stored).max() <= 1 and (ours == stored).mean() >= 0.999
        assert np.abs(whole.astype(int) - sequences).max() <= 1
    elif name == "float16":
        np.testing.assert_array_equal(ours, stored)
        np.testing.assert_allclose(whole, sequences, atol=1e-3)
    else:
        np.testing.assert_array_equal(ours, stored)
        np.testing.assert_array_equal(whole, sequences)


def test_a_cls_model_refuses_spans_up_front_and_at_step(tmp_path):
    write_random_model("tiny-xlm-roberta", tmp_path)
    config = EngineConfig(model=str(tmp_path), device="cpu")
    with pytest.raises(ValueError, match="late chunking needs mean or last-token pooling; this model pools by 'cls'"):
        model_spec(config).output.check_span_pooling()  # before any weights load
    engine = Engine(config)
    with pytest.raises(ValueError, match="late chunking needs mean or last-token pooling"):
        engine.step(pack([[101, 2000, 3000, 102]], spans=[[(0, 2)]]))
    assert engine.step(pack([[101, 2000, 3000, 102]])).result().shape == (1, 64)  # sequences still embed
    model_spec(EngineConfig(model=str(tmp_path), pooling="mean")).output.check_span_pooling()
