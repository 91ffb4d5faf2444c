"""Late chunking on the CUDA runner: batches with spans run eagerly (graphs stay for the others), their rows
come back in order through the pinned slots, within bfloat16's error of transformers in float32.

Marked `gpu`: skipped without a CUDA device.
"""
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack, split_in_halves
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.testing.random_model import write_random_model

from support.late_chunking import random_documents, reference_span_embeddings, windows
from support.numerics import cosine

pytestmark = pytest.mark.gpu


def _late_chunked(documents, size=256, stride=192):
    return pack(documents, BucketPolicy(), spans=[windows(len(d), size, stride) for d in documents])


@pytest.mark.parametrize("shape,pooling,lengths,bidirectional", [
    ("bert-base", "mean", [512, 300, 77], False),  # a CLS model, pooled by mean on request
    ("qwen3-0.6b", None, [4000, 2500, 900, 3], False),  # causal, last token
    ("pplx-embed-0.6b", None, [3000, 1200], True),  # bidirectional, mean, not normalised
])
def test_span_rows_in_order_match_transformers_fp32(tmp_path, shape, pooling, lengths, bidirectional):
    reference = write_random_model(shape, tmp_path).cuda()
    engine = Engine(EngineConfig(model=str(tmp_path), device="cuda", pooling=pooling))
    documents = random_documents(0, lengths)
    batch = _late_chunked(documents)
    rows = engine.step(batch).result()
    out = engine.output
    want = torch.cat([reference_span_embeddings(reference, d, s, out.pooling, out.normalize, bidirectional)
                      for d, s in zip(documents, batch.relative_spans())])
    assert rows.shape == (batch.num_spans, out.width)
    assert cosine(rows, want).min() >= 0.999
    assert cosine(rows[1:], want[:-1]).min() < 0.999  # so rows one place off would fail


def test_span_batches_run_eagerly_and_graphs_stay_for_the_others(tmp_path):
    write_random_model("qwen3-0.6b", tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cuda"))
    batch = _late_chunked(random_documents(1, [2000, 700]))
    first = engine.step(batch).result()
    for _ in range(3):
        torch.testing.assert_close(engine.step(batch).result(), first, atol=0, rtol=0)
    assert engine.counters.as_dict() == {"eager_runs": 4, "graph_captures": 0, "graph_replays": 0}
    plain = pack(random_documents(2, [100, 60]), BucketPolicy())
    for _ in range(3):
        engine.step(plain).result()
    assert engine.counters.as_dict() == {"eager_runs": 5, "graph_captures": 1, "graph_replays": 2}


def test_span_batches_in_flight_and_split_give_the_rows_of_one_at_a_time(tmp_path):
    """Several span batches in flight through the reused pinned slots (and plain batches between them), and
    the OOM split's halves, give the rows one batch at a time gives."""
    write_random_model("bert-base", tmp_path)
    engine = Engine(EngineConfig(model=str(tmp_path), device="cuda", pooling="mean"))
    batches = [_late_chunked(random_documents(seed, [512, 100 + 40 * seed, 9])) for seed in range(8)]
    one_at_a_time = [engine.step(b).result() for b in batches]
    pending = []
    for b in batches:
        pending.append(engine.step(b))
        engine.step(pack([[101, 2000, 102]], BucketPolicy()))
    for handle, want in zip(pending, one_at_a_time):
        torch.testing.assert_close(handle.result(), want, atol=0, rtol=0)
    halves = torch.cat([engine.step(h).result() for h in split_in_halves(batches[0], BucketPolicy())])
    assert cosine(halves, one_at_a_time[0]).min() >= 0.9999
