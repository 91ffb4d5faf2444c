"""The CUDA engine against the float32 references, graph replay against eager, and double-buffering.

Marked `gpu`: skipped without a CUDA device; run on the H200 (see benchmarks/gpu_setup.sh).
"""
import numpy as np
import pytest
import torch

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.batching.embed import embed_texts
from embedpipe.pipeline.index.job import load_engine
from embedpipe.pipeline.text.tokenizer import make_tokenizer

from support.numerics import cosine
from support.corpus import read_embeddings, run_index, variant_texts, vectors_of, write_corpus
from support.reference import reference_embeddings

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
    ref = reference_embeddings(reference, sequences, engine.output.pooling, engine.output.normalize, bidirectional)
    assert cosine(ours, ref).min() >= 0.999


def _same_key_batches(engine, rng, count, num_seqs=10, num_tokens=1000):
    """`count` batches of other lengths (each within half the mean of the mean) that share one graph
    key of `engine`: the most frequent key among 40 drawn."""
    base, drawn = num_tokens // num_seqs, []
    for _ in range(40):
        shifts = rng.integers(0, base // 2, size=num_seqs)
        lengths = base + shifts - rng.permutation(shifts)  # sums to num_seqs * base
        lengths[-1] += num_tokens - num_seqs * base + int(rng.integers(0, 24))
        drawn.append(pack([rng.integers(1000, 30000, size=int(n)).tolist() for n in lengths], POLICY))
    keys = [engine.runner.attn.graph_key(b) for b in drawn]
    common = max(set(keys), key=keys.count)
    batches = [b for b, key in zip(drawn, keys) if key == common][:count]
    assert len(batches) == count
    return batches


GRAPHED = [("minilm", "auto"), ("bert-base", "auto"), ("qwen3-0.6b", "auto"),
           ("minilm", "triton"), ("bert-base", "triton"), ("qwen3-0.6b", "triton"),
           ("bert-base", "fa2"), ("qwen3-0.6b", "fa2"), ("bert-base", "fa3"), ("qwen3-0.6b", "fa3")]


def engine_for(tmp_path, model: str, attention: str, **config) -> Engine:
    if attention in ("fa2", "fa3"):
        pytest.importorskip("flashinfer")
    if model != "minilm" and not (tmp_path / "config.json").exists():
        write_random_model(model, tmp_path)
    return Engine(EngineConfig(model="minilm" if model == "minilm" else str(tmp_path), device="cuda",
                               attention=attention, **config))


@pytest.mark.parametrize("num_seqs,num_tokens", [(10, 1000), (200, 16000)])  # keys (1024, 16), (16128, 256)
@pytest.mark.parametrize("model,attention", GRAPHED)
def test_graph_replay_equals_eager(tmp_path, model, attention, num_seqs, num_tokens):
    """One key replayed with other sequence lengths at every replay than it was captured with, zero-length
    padding slots included (FlashInfer replayed so hit an illegal memory access)."""
    engine = engine_for(tmp_path, model, attention)
    eager = engine_for(tmp_path, model, attention, graphs=GraphConfig(enabled=False))
    batches = _same_key_batches(engine, np.random.default_rng(2), 4, num_seqs, num_tokens)
    assert len({tuple(b.cu_seqlens.tolist()) for b in batches}) == 4  # four layouts, one graph
    assert all(b.num_seqs + 1 < b.key[1] for b in batches)  # empty slots after the padding sequence
    results = [engine.step(b).result() for b in batches]
    assert engine.counters.as_dict() == {"eager_runs": 1, "graph_captures": 1, "graph_replays": 3}
    for batch, got in zip(batches, results):
        want = eager.step(batch).result()
        assert cosine(got, want).min() >= 0.9999
        torch.testing.assert_close(got, want, atol=5e-3, rtol=0)


@pytest.mark.parametrize("model,attention", [m for m in GRAPHED if m[1] != "auto" and m[0] != "minilm"])
def test_each_backend_eager_and_replayed_matches_transformers_fp32(tmp_path, model, attention):
    """fa2 / fa3 / triton, eager then captured and replayed, against the float32 reference (the house standard;
    against PyTorch's bf16 flash varlen kernel Qwen3-0.6B fa2 agreed to cosine 0.99989, split-KV reducing
    otherwise)."""
    reference = write_random_model(model, tmp_path).cuda()
    engine = engine_for(tmp_path, model, attention)
    for batch in _same_key_batches(engine, np.random.default_rng(4), 3, 200, 16000):
        sequences = [batch.input_ids[a:b].tolist() for a, b in zip(batch.cu_seqlens[:batch.num_seqs].tolist(),
                                                                     batch.cu_seqlens[1:batch.num_seqs + 1].tolist())]
        want = reference_embeddings(reference, sequences, engine.output.pooling, engine.output.normalize, False)
        assert cosine(engine.step(batch).result(), want).min() >= 0.999
    assert engine.counters.as_dict() == {"eager_runs": 1, "graph_captures": 1, "graph_replays": 2}


@pytest.mark.parametrize("model,bidirectional", [("bert-base", False), ("qwen3-0.6b", False),
                                                 ("pplx-embed-0.6b", True)])
def test_small_batches_eager_and_replayed_match_transformers_fp32(tmp_path, model, bidirectional):
    """The paths only batches of up to 256 tokens take, with the Triton attention: programmatic dependent launch,
    the split-K projections, and (sequences up to 128 tokens) Qwen3's q/k norm and RoPE folded into the attention
    kernel; one query, one 128-token text and a few short texts, each eager, captured, then replayed (a capture
    replays its graph for its own result: two replays a layout)."""
    reference = write_random_model(model, tmp_path).cuda()
    engine = engine_for(tmp_path, model, "triton")
    rng = np.random.default_rng(6)
    for lengths in ([16], [128], [40, 7, 100], [200]):
        sequences = [rng.integers(1000, 30000, size=n).tolist() for n in lengths]
        want = reference_embeddings(reference, sequences, engine.output.pooling, engine.output.normalize,
                                    bidirectional)
        for _ in range(3):
            assert cosine(engine.step(pack(sequences, POLICY)).result(), want).min() >= 0.999
    assert engine.counters.as_dict() == {"eager_runs": 4, "graph_captures": 4, "graph_replays": 8}


@pytest.mark.parametrize("model,attention", [("minilm", "auto"), ("bert-base", "auto"), ("bert-base", "fa2"),
                                             ("qwen3-0.6b", "fa3"), ("minilm", "triton"), ("bert-base", "triton"),
                                             ("qwen3-0.6b", "triton")])
def test_double_buffered_equals_one_at_a_time(tmp_path, model, attention):
    """1,000 randomly sized batches with two in flight give what they give one at a time."""
    engine = engine_for(tmp_path, model, attention)
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


@pytest.mark.parametrize("model,attention", [("bert-base", "fa3"), ("qwen3-0.6b", "fa2")])
def test_flashinfer_plans_a_graph_key_again_only_when_its_layout_changed(tmp_path, model, attention):
    """A repeated layout runs on the wrapper's plan as it is (no host plan); a new one is planned; each result
    equals the eager engine's."""
    engine = engine_for(tmp_path, model, attention)
    eager = engine_for(tmp_path, model, attention, graphs=GraphConfig(enabled=False))
    first, second = _same_key_batches(engine, np.random.default_rng(6), 2, 10, 1000)
    for _ in range(2):  # eager, then captured
        engine.step(first).result()
    planned = engine.attn._graphed[engine.attn.graph_key(first)]
    plans, plan = [], planned.wrapper.plan
    planned.wrapper.plan = lambda *args, **kwargs: (plans.append(1), plan(*args, **kwargs))[1]
    for batch, planned_again in ((first, False), (first, False), (second, True), (second, False), (first, True)):
        before = len(plans)
        got = engine.step(batch).result()
        assert (len(plans) > before) == planned_again
        assert cosine(got, eager.step(batch).result()).min() >= 0.9999
    assert engine.counters.as_dict() == {"eager_runs": 1, "graph_captures": 1, "graph_replays": 6}


def test_a_job_engine_on_cuda_leaves_one_torch_thread_and_a_bare_engine_none(tmp_path):
    """Its host work is small copies; more threads spin between them (Engine.claim_host_threads). The job's
    loader claims the process's threads; an Engine made by a library user leaves them as they were."""
    write_random_model("tiny-bert", tmp_path)
    torch.set_num_threads(4)
    Engine(EngineConfig(model=str(tmp_path), device="cuda"))
    assert torch.get_num_threads() == 4
    load_engine(EngineConfig(model=str(tmp_path), device="cuda"))
    assert torch.get_num_threads() == 1


def test_the_index_job_on_cuda_writes_the_cpu_jobs_rows_in_order(tmp_path):
    """Small batches, many in flight: each batch's rows are scattered from the engine's reused pinned
    buffers (LazyTensor.read) into their own chunks' rows, the CPU job's rows within bfloat16's error."""
    write_corpus(tmp_path / "in", variant_texts(3000), num_files=2, row_group_size=400)
    for device in ("cuda", "cpu"):
        done = run_index(tmp_path / "in", "--output", tmp_path / device, "--device", device,
                         "--max-batch-tokens", "1024", "--quiet")
        assert done.returncode == 0, done.stderr[-2000:]
    on_cuda, on_cpu = read_embeddings(tmp_path / "cuda"), read_embeddings(tmp_path / "cpu")
    assert on_cuda.column("id").equals(on_cpu.column("id")) and len(on_cuda) == 3000
    assert cosine(vectors_of(on_cuda), vectors_of(on_cpu)).min() >= 0.999
