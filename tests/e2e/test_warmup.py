"""`embedpipe warmup` runs every phase of the engine once per shape, and on CUDA measures the attention backends."""
import json

import pytest

from support.corpus import run_index, variant_texts, write_corpus
from embedpipe.kernels.cuda.attention import flashinfer_installed
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.api import WARMUP_SHAPES, run_warmup


def test_warmup_runs_each_shape_three_times(tmp_path):
    write_random_model("tiny-bert", tmp_path)
    timings = run_warmup(EngineConfig(model=str(tmp_path), device="cpu"))
    for num_seqs, length in WARMUP_SHAPES:
        for phase in ("first", "second", "third"):
            assert timings[f"{num_seqs}x{length}_{phase}_s"] > 0


@pytest.mark.gpu
def test_warmup_captures_the_small_shape_and_runs_the_large_one_eagerly():
    timings = run_warmup(EngineConfig(device="cuda"))
    # each shape (2 x 100, and 64 x 256 = the 16384-token largest graph): eager, capture + replay, replay
    assert (timings["eager_runs"], timings["graph_captures"], timings["graph_replays"]) == (2, 2, 4)


def test_warmup_on_the_cpu_measures_no_attention(tmp_path):
    write_random_model("tiny-bert", tmp_path / "model")
    timings = run_warmup(EngineConfig(model=str(tmp_path / "model"), device="cpu"))
    assert timings["attention"] == "torch (CPU: exact per-sequence SDPA)"
    assert not [name for name in timings if name.startswith("attention_")]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["minilm", "bert-base", "qwen3-0.6b"])
def test_warmup_measures_the_attention_backends_and_auto_runs_the_fastest(tmp_path, monkeypatch, shape):
    """Every backend passes the replay == eager check at every size; the table's choice is what auto engines run,
    and an index job records it in metrics.json. MiniLM (head_dim 32): torch-varlen and the Triton kernel."""
    monkeypatch.setenv("EMBEDPIPE_CACHE_DIR", str(tmp_path / "cache"))
    model = "minilm"
    if shape != "minilm":
        write_random_model(shape, tmp_path / "model")
        model = str(tmp_path / "model")
    timings = run_warmup(EngineConfig(model=model, device="cuda"))
    measured = {name for name in timings if name.startswith("attention_") and name.endswith("_ms")}
    assert not [name for name in timings if name.startswith("attention_failed_")], timings
    engine = Engine(EngineConfig(model=model, device="cuda"))
    backends = {"torch-varlen", "triton"} | ({"fa2", "fa3"} if flashinfer_installed() and shape != "minilm" else set())
    assert measured == {f"attention_{tokens}_tokens_{backend}_ms" for tokens in (128, 2048, 32768)
                        for backend in backends}, measured
    assert "measured by embedpipe warmup" in engine.attn.choice.note
    assert timings["attention"] == engine.attention
    write_corpus(tmp_path / "in", variant_texts(300), num_files=1, row_group_size=100)
    # the job's process inherits EMBEDPIPE_CACHE_DIR
    result = run_index(tmp_path / "in", "--output", tmp_path / "out", "--model", model, "--device", "cuda")
    assert result.returncode == 0, result.stderr
    assert f"attention: {engine.attention}" in result.stderr
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["engine"]["attention"] == engine.attention
