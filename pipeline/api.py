"""`embedpipe warmup`: compile a model's kernels ahead of a job (FlashInfer JIT, Triton, cuBLAS)."""
from __future__ import annotations

import sys
import time

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig

# (sequences, tokens each): a small batch (eager, then captured and replayed) and a large one (eager)
WARMUP_SHAPES = ((2, 100), (64, 512))


def run_warmup(config: EngineConfig) -> dict[str, float]:
    """Runs each warm-up shape three times: eager, capture, replay. Returns seconds per phase."""
    start = time.perf_counter()
    engine = Engine(config)
    timings = {"load_s": time.perf_counter() - start}
    max_len = min(engine.folder.max_seq_length, 512)
    for num_seqs, length in WARMUP_SHAPES:
        batch = pack([[100 + i % 1000 for i in range(min(length, max_len))]] * num_seqs, BucketPolicy())
        for phase in ("first", "second", "third"):
            start = time.perf_counter()
            engine.step(batch).result()
            timings[f"{num_seqs}x{length}_{phase}_s"] = time.perf_counter() - start
    timings.update(engine.counters.as_dict())
    for name, value in timings.items():
        print(f"{name:>24}: {value:.3f}" if isinstance(value, float) else f"{name:>24}: {value}", file=sys.stderr)
    return timings
