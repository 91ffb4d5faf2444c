"""Rerankers on the CUDA runner (task "score", bfloat16 so that graphs capture): eager, captured and replayed steps
give the same scores, within bfloat16's error of the CPU engine's float32 ones, whatever the batch packing.

Marked `gpu`: skipped without a CUDA device.
"""
import numpy as np
import pytest

from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.rerank import score_pairs
from embedpipe.pipeline.text.pairs import make_pair_tokenizer

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape", ["tiny-bert-cross-encoder", "tiny-xlm-roberta-cross-encoder", "tiny-qwen3-reranker"])
def test_cuda_scores_equal_the_cpu_engine_eager_captured_and_replayed(tmp_path, texts, shape):
    write_random_model(shape, tmp_path)
    cpu = Engine(EngineConfig(model=str(tmp_path), device="cpu", task="score"))
    cuda = Engine(EngineConfig(model=str(tmp_path), device="cuda", task="score"))
    pairs = make_pair_tokenizer(cpu, 224).encode("how do graphs make small batches fast?", texts[:60])
    expected = score_pairs(cpu, pairs)
    # the same keys three times (eager, capture, replay), then other keys (eager again)
    runs = [score_pairs(cuda, pairs, BatcherConfig(max_batch_tokens=budget)) for budget in (1024, 1024, 1024, 4096)]
    counters = cuda.counters.as_dict()
    assert counters["graph_captures"] >= 1 and counters["graph_replays"] >= 1, counters
    for got in runs:
        np.testing.assert_allclose(got, runs[0], atol=2e-3)  # graphs and packing change nothing but rounding
        np.testing.assert_allclose(got, expected, atol=0.05)  # bfloat16 against float32
    assert np.corrcoef(runs[2], expected)[0, 1] > 0.99
