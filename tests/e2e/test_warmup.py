"""`embedpipe warmup` runs every phase of the engine once per shape."""
import pytest

from embedpipe.kernels.engine import EngineConfig
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
