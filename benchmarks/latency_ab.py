"""Batch-1 latency of two builds of the engine, A B A B ..., each run in a fresh process (GPU).

    python benchmarks/latency_ab.py --out DIR --system before=/path/to/site --system after= \\
        [--models minilm-l6,bert-base,qwen3-0.6b] [--lengths 16,128] [--rounds 3]

A system is a name and a PYTHONPATH entry put first (empty: this checkout), so an older build installed
with `pip install --no-deps --target SITE` runs the same script on the same model folders. Every process warms
the GPU's clocks (a second of matmuls) before it times `step(batch).result()` for each model and length.
Writes DIR/latency-ab.json (every round, the median and the spread) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(folders: dict[str, str], lengths: list[int], attention: str) -> dict:
    import numpy as np
    import torch

    from common import random_sequences, time_calls
    from embedpipe.kernels.batch import BucketPolicy, pack
    from embedpipe.kernels.engine import Engine, EngineConfig

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    while time.perf_counter() - start < 1.0:  # steady clocks before anything is timed
        a @ a
    torch.cuda.synchronize()
    clocks = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    out = {"clocks": clocks}
    for name, folder in folders.items():
        engine = Engine(EngineConfig(model=folder, device="cuda", attention=attention))
        for length in lengths:
            batch = pack(random_sequences(np.random.default_rng(0), 1, length), BucketPolicy())
            # 30 untimed: eager, capture, then replays
            samples = time_calls(lambda: engine.step(batch).result(), iters=300, warmup=30)
            out[f"{name} 1x{length}"] = statistics.median(samples)
        engine = None  # its graphs and buffers go before the next model loads
        torch.cuda.empty_cache()
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--system", action="append", default=[], help="NAME=PYTHONPATH (empty: this checkout)")
    parser.add_argument("--models", default="minilm-l6,bert-base,qwen3-0.6b")
    parser.add_argument("--lengths", default="16,128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attention", default="auto")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON of the worker's arguments
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(worker(spec["folders"], spec["lengths"], spec["attention"])))
        return
    import torch

    from common import ab_systems, model_folder
    with torch.device("cuda"):  # random weights made on the device: seconds
        folders = {name: str(model_folder(name, args.cache)) for name in args.models.split(",")}
    spec = json.dumps({"folders": folders, "lengths": [int(n) for n in args.lengths.split(",")],
                       "attention": args.attention})
    systems = ab_systems(args.system)
    rounds: dict[str, list[dict]] = {name: [] for name in systems}
    for r in range(args.rounds):
        for name, pythonpath in systems.items():
            env = {**os.environ, "PYTHONPATH": pythonpath}
            done = subprocess.run([sys.executable, __file__, "--worker", spec], env=env, cwd=HERE,
                                  capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{name} round {r}: {done.stderr[-2000:]}")
            rounds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(name, r, rounds[name][-1], flush=True)
    summary = {}
    for name, results in rounds.items():
        for key in results[0]:
            if key != "clocks":
                values = [res[key] for res in results]
                summary.setdefault(key, {})[name] = {"median_ms": statistics.median(values),
                                                     "min_ms": min(values), "max_ms": max(values)}
    for key, by_system in summary.items():
        print(f"{key:24s}", "  ".join(f"{n} {v['median_ms']:.3f} ms [{v['min_ms']:.3f}-{v['max_ms']:.3f}]"
                                       for n, v in by_system.items()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "latency-ab.json").write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
