"""Where the device time goes: the top CUDA kernels of one eager forward pass, per model and shape.

    python benchmarks/profile_engine.py --models bert-base,qwen3-0.6b
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from torch.profiler import ProfilerActivity, profile

from common import model_folder, random_sequences
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig


def profile_shape(engine: Engine, num_seqs: int, length: int, top: int) -> None:
    batch = pack(random_sequences(np.random.default_rng(0), num_seqs, length), BucketPolicy())
    for _ in range(3):
        engine.step(batch).result()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.step(batch).result()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.device_time_total for e in events)
    print(f"--- {num_seqs}x{length}: {total / 1e3:.3f} ms device time, {sum(e.count for e in events)} kernels")
    for e in sorted(events, key=lambda e: -e.device_time_total)[:top]:
        print(f"{e.device_time_total / 1e3:8.3f} ms {e.count:5d}x  {e.key[:110]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="minilm,bert-base,qwen3-0.6b")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    for name in args.models.split(","):
        folder = model_folder(name, args.cache)
        engine = Engine(EngineConfig(model=str(folder), device="cuda", graphs=GraphConfig(enabled=False)))
        print(f"===== {name} ({type(engine.attn).__name__})")
        for shape in ((1, 128), (64, 512)):
            profile_shape(engine, *shape, args.top)


if __name__ == "__main__":
    main()
