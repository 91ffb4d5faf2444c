"""The CUDA engine against the float32 references, graph replay against eager, and double-buffering.

Marked `gpu`: skipped without a CUDA device; run on the H200 (see benchmarks/gpu_check.sh).
"""
import numpy as np
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig
from embedpipe.kernels.random_model import write_random_model
from embedpipe.pipeline.embed import embed_texts, make_tokenizer

from conftest import cosine
from test_model_parity import _reference_embeddings

pytestmark = pytest.mark.gpu
POLICY = BucketPolicy()


def _random_batches(rng, count, max_seqs=24, max_len=300):
    for _ in range(count):
        lengths = rng.integers(1, max_len, size=int(rng.integers(1, max_seqs)))
        yield [rng.integers(1000, 30000, size=n).tolist() for n in lengths]


def test_minilm_bf16_matches_sentence_transformers(texts, minilm_reference):
    engine = Engine(EngineConfig(device="cuda"))
    ours = embed_texts(engine, make_tokenizer(engine), texts)
    ref = minilm_reference.encode(texts, batch_size=32)
    assert cosine(ours, ref).min() >= 0.999


@pytest.mark.parametrize("shape,bidirectional", [("bert-base", False), ("qwen3-0.6b", False),
                                                 ("pplx-embed-0.6b", True)])
def test_random_weight_shapes_bf16_match_transformers_fp32(tmp_path, shape, bidirectional):
    reference = write_random_model(shape, tmp_path).cuda()
    engine = Engine(EngineConfig(model=str(tmp_path), device="cuda"))
    sequences = next(_random_batches(np.random.default_rng(1), 1, max_seqs=32, max_len=400))
    ours = engine.step(pack(sequences, POLICY)).result()
    ref = _reference_embeddings(reference, sequences, engine.output.pooling, engine.output.normalize, bidirectional)
    assert cosine(ours, ref).min() >= 0.999


@pytest.mark.parametrize("attention", ["auto", "torch-varlen"])
def test_graph_replay_equals_eager(attention):
    engine = Engine(EngineConfig(device="cuda", attention=attention))
    eager = Engine(EngineConfig(device="cuda", attention=attention, graphs=GraphConfig(enabled=False)))
    rng = np.random.default_rng(2)
    first, second, third = _random_batches(rng, 3)
    # same key for all three: pad each to one bucket
    policy = BucketPolicy(small_token_step=4096, large_token_step=4096, large_token_threshold=4096)
    results = [engine.step(pack(b, policy)).result() for b in (first, second, third)]
    assert engine.counters.as_dict() == {"eager_runs": 1, "graph_captures": 1, "graph_replays": 2}
    for batch, got in zip((first, second, third), results):
        want = eager.step(pack(batch, policy)).result()
        torch.testing.assert_close(got, want, atol=2e-3, rtol=0)
        assert cosine(got, want).min() >= 0.99999


@pytest.mark.parametrize("model", ["minilm", "bert-base"])  # PyTorch varlen and FlashInfer attention
def test_double_buffered_equals_one_at_a_time(tmp_path, model):
    """1,000 randomly sized batches with two in flight give what they give one at a time."""
    if model != "minilm":
        write_random_model(model, tmp_path)
        model = str(tmp_path)
    engine = Engine(EngineConfig(model=model, device="cuda"))
    batches = [pack(b, POLICY) for b in _random_batches(np.random.default_rng(3), 1000, max_len=120)]
    for _ in range(2):  # every key is captured (or stays eager past the graph limit) before comparing
        [engine.step(b).result() for b in batches]
    one_at_a_time = [engine.step(b).result() for b in batches]
    pipelined, pending = [], []
    for b in batches:
        pending.append(engine.step(b))
        if len(pending) == 2:
            pipelined.append(pending.pop(0).result())
    pipelined += [p.result() for p in pending]
    assert engine.counters.replays > 1000
    for a, b in zip(one_at_a_time, pipelined):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
