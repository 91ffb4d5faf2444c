"""Batch-1 latency of builds or attention backends of the engine, A B A B ..., each run in a fresh process (GPU).

    python benchmarks/latency_ab.py --out DIR --system before=/path/to/site --system after= \\
        [--models minilm-l6,bert-base,qwen3-0.6b] [--lengths 16,128] [--rounds 3] [--attention auto,triton]

A system is a name and a PYTHONPATH entry put first (empty: this checkout), so an older build installed
with `pip install --no-deps --target SITE` runs the same script on the same model folders. With several
attention backends, each system runs each of them (as "NAME/BACKEND"), all alternating round by round.
Every process warms the GPU's clocks (a second of matmuls) before it times `step(batch).result()` for each
model and length, then the step's graph replayed back to back ("replay": the device's part alone). Each step
repeats one layout, so FlashInfer's plan (skipped for a repeated layout) costs nothing here; a server meets a new
layout at almost every request. With --throughput the engines capture graphs up to that batch's tokens (as
engine_bench.py's), past the index job's default 16,384.
Writes DIR/latency-ab.json (every round, the median and the spread) after each whole round, and prints a table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(folders: dict[str, str], lengths: list[int], attention: str, throughput: list[int] | None = None) -> dict:
    import numpy as np
    import torch

    from common import ceilings, cuda_ms, random_sequences, time_calls, two_in_flight_s, warm_gpu
    from embedpipe.kernels.batch import BucketPolicy, pack
    from embedpipe.kernels.engine import Engine, EngineConfig
    from embedpipe.kernels.graph_cache import GraphConfig

    out = {"clocks": warm_gpu(1.0)}  # steady clocks before anything is timed
    if throughput:
        out["ceiling_tflops"] = ceilings("cuda")["matmul_tflops"]  # dense bf16 matmul rate, read in every process
    # the throughput batch replays a graph too (as engine_bench.py's), past the default 16,384 graph tokens
    graphs = GraphConfig(max_graph_tokens=max(GraphConfig().max_graph_tokens, math.prod(throughput or [0])))
    for name, folder in folders.items():
        engine = Engine(EngineConfig(model=folder, device="cuda", attention=attention, graphs=graphs))
        for length in lengths:
            batch = pack(random_sequences(np.random.default_rng(0), 1, length), BucketPolicy())
            # 30 untimed: eager, capture, then replays
            samples = time_calls(lambda: engine.step(batch).result(), iters=300, warmup=30)
            out[f"{name} 1x{length}"] = statistics.median(samples)
            # the device's part alone: the step's graph replayed back to back (no host work between)
            out[f"{name} 1x{length} replay"] = cuda_ms(engine.runner.captured_graph(batch).replay, 300)
        if throughput:
            num_seqs, length = throughput
            batch = pack(random_sequences(np.random.default_rng(0), num_seqs, length), BucketPolicy())
            out[f"{name} {num_seqs}x{length} batch"] = two_in_flight_s(engine, batch) * 1e3  # ms per batch
        engine = None  # its graphs and buffers go before the next model loads
        torch.cuda.empty_cache()
    return out


def latency_summary(rounds: dict[str, list[dict]]) -> dict:
    """{key: {run: {median_ms, min_ms, max_ms}}} over the rounds so far (steps, replays, throughput batches)."""
    summary = {}
    for name, results in rounds.items():
        for key in results[0]:
            if key not in ("clocks", "ceiling_tflops"):
                values = [res[key] for res in results]
                summary.setdefault(key, {})[name] = {"median_ms": statistics.median(values),
                                                     "min_ms": min(values), "max_ms": max(values)}
    return summary


def throughput_summary(rounds: dict[str, list[dict]], flops_per_token: dict[str, float]) -> dict:
    """{key: {run: {M tokens/s, MFU}}}: median [min-max] over rounds; MFU against the median of the matmul rates all
    the run's processes measured (one process's reading moved 608-768 TFLOP/s on one H200: against its own, two
    runs' MFU ordered opposite to their tokens/s)."""
    ceiling = statistics.median(r["ceiling_tflops"] for results in rounds.values() for r in results)
    summary = {}
    for run, results in rounds.items():
        for key in (k for k in results[0] if k.endswith(" batch")):
            model, shape = key.split()[:2]
            tokens = math.prod(int(n) for n in shape.split("x"))
            rates = [tokens / r[key] / 1e3 for r in results]  # M tokens/s
            mfus = [rate * 1e6 * flops_per_token[model] / (ceiling * 1e12) for rate in rates]
            summary.setdefault(key, {})[run] = {
                "m_tokens_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                "mfu": statistics.median(mfus), "mfu_min": min(mfus), "mfu_max": max(mfus), "ceiling_tflops": ceiling}
    return summary


def system_runs(systems: dict[str, str], attentions: list[str]) -> dict[str, tuple[str, str]]:
    """{run name: (PYTHONPATH, attention backend)}: every system with every backend ("NAME/BACKEND" when several)."""
    return {(f"{name}/{attention}" if len(attentions) > 1 else name): (pythonpath, attention)
            for name, pythonpath in systems.items() for attention in attentions}


def main():
    from common import ab_systems, add_system_option, linear_params, model_folder

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    add_system_option(parser)
    parser.add_argument("--models", default="minilm-l6,bert-base,qwen3-0.6b")
    parser.add_argument("--lengths", default="16,128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attention", default="auto", help="a backend, or several separated by commas")
    parser.add_argument("--throughput", help="also a batch of SEQSxTOKENS (e.g. 64x512): ms per batch, two in "
                        "flight, and M tokens/s and MFU against the matmul rate the run's processes measured")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON of the worker's arguments
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        print(json.dumps(worker(spec["folders"], spec["lengths"], spec["attention"], spec["throughput"])))
        return
    import torch

    with torch.device("cuda"):  # random weights made on the device: seconds
        folders = {name: str(model_folder(name, args.cache)) for name in args.models.split(",")}
    throughput = [int(n) for n in args.throughput.split("x")] if args.throughput else None
    spec = {"folders": folders, "lengths": [int(n) for n in args.lengths.split(",")], "throughput": throughput}
    runs = system_runs(ab_systems(args.system), args.attention.split(","))
    rounds: dict[str, list[dict]] = {name: [] for name in runs}
    flops = {name: 2 * linear_params(Path(folder)) for name, folder in folders.items()}  # dense FLOPs per token
    for r in range(args.rounds):
        for name, (pythonpath, attention) in runs.items():
            env = {**os.environ, "PYTHONPATH": pythonpath}
            done = subprocess.run([sys.executable, __file__, "--worker", json.dumps({**spec, "attention": attention})],
                                  env=env, cwd=HERE, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{name} round {r}: {done.stderr[-2000:]}")
            rounds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(name, r, rounds[name][-1], flush=True)
        # written after every whole round: a run cut short (a device call's deadline) keeps its finished rounds
        summary = latency_summary(rounds)
        rates = throughput_summary(rounds, flops) if throughput else {}
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "latency-ab.json").write_text(json.dumps({"rounds": rounds, "summary": summary,
                                                                  "throughput": rates}, indent=2))
    for key, by_system in summary.items():
        print(f"{key:24s}", "  ".join(f"{n} {v['median_ms']:.3f} ms [{v['min_ms']:.3f}-{v['max_ms']:.3f}]"
                                       for n, v in by_system.items()))
    for key, by_run in rates.items():
        print(f"{key:24s}", "  ".join(f"{n} {v['m_tokens_per_s']:.3f} M tok/s [{v['min']:.3f}-{v['max']:.3f}] "
                                       f"MFU {v['mfu']:.1%}" for n, v in by_run.items()))


if __name__ == "__main__":
    main()
