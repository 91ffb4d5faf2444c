"""Does a batch-1 step's time depend on the CPU core its process runs on? (GPU)

The same code's batch-1 step moved 0.362-0.424 ms between fresh processes (BERT-base 1 x 128 on the H200, 2026-12-06,
results/2026-12-06-h200-launch call 6) while its graph replayed back to back stayed within 1 us: the spread is on
the host. This runs the step in fresh processes, each pinned to one core (taskset's affinity, set before torch
loads) with one torch thread, and unpinned with torch's threads as they come and with one, alternated over rounds;
it prints per placement the p50 of a step with its result and of a lone replay (launch to synchronize's return),
and records the host's NUMA layout and the GPU's CPU affinity. On one H100 host (one NUMA node, call 8) every
placement gave 0.360-0.362 ms.

    python benchmarks/host_placement.py --out DIR [--model bert-base] [--length 128] [--cpus 0,4,8,12] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def probe(model: str, length: int, cache: Path, one_thread: bool) -> dict:
    import numpy as np
    import torch

    from common import model_folder, random_sequences, time_calls, warm_gpu
    from embedpipe.kernels.batch import BucketPolicy, pack
    from embedpipe.kernels.engine import Engine, EngineConfig

    warm_gpu(1.0)  # steady clocks
    engine = Engine(EngineConfig(model=str(model_folder(model, cache)), device="cuda", attention="triton"))
    if one_thread:  # what the job and server processes do (Engine.claim_host_threads)
        engine.claim_host_threads()
    batch = pack(random_sequences(np.random.default_rng(0), 1, length), BucketPolicy())
    step = statistics.median(time_calls(lambda: engine.step(batch).result(), iters=1000, warmup=30))
    graph = engine.runner.captured_graph(batch)
    lone = statistics.median(time_calls(lambda: (graph.replay(), torch.cuda.synchronize()), iters=300, warmup=10))
    cpus = os.sched_getaffinity(0)
    return {"cpus": sorted(cpus) if len(cpus) < 4 else "any", "torch_threads": torch.get_num_threads(),
            "step_ms": step, "lone_replay_ms": lone}


def host_layout() -> dict:
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{cmd[0]}: {e}"
    return {"lscpu": run(["lscpu"]), "numactl": run(["numactl", "-H"]),
            "topo": run(["nvidia-smi", "topo", "-m"])}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--cpus", default="0,4,8,12")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--one-thread", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(args.model, args.length, args.cache, args.one_thread)))
        return
    results = {"layout": host_layout(), "runs": []}
    print(results["layout"]["topo"], flush=True)
    # "any": unpinned, torch's threads as they come; "any/1": unpinned, one torch thread; a core: pinned, one thread
    placements = ["any", "any/1"] + args.cpus.split(",")
    for round_ in range(args.rounds):
        for cpu in placements:
            prefix = [] if cpu.startswith("any") else ["taskset", "-c", cpu]
            command = prefix + [sys.executable, str(HERE / "host_placement.py"), "--probe", "--model", args.model,
                                "--length", str(args.length), "--cache", str(args.cache)]
            command += [] if cpu == "any" else ["--one-thread"]
            done = subprocess.run(command, capture_output=True, text=True, cwd=HERE)
            line = done.stdout.strip().splitlines()[-1] if done.returncode == 0 else None
            run = {"placement": cpu, "round": round_} | (json.loads(line) if line else {"error": done.stderr[-800:]})
            results["runs"].append(run)
            print(json.dumps(run), flush=True)
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "host-placement.json").write_text(json.dumps(results, indent=1))
    for cpu in placements:
        steps = [r["step_ms"] for r in results["runs"] if r["placement"] == cpu and "step_ms" in r]
        if steps:
            print(f"cpu {cpu:>4}: step p50 {statistics.median(steps):.3f} ms [{min(steps):.3f}-{max(steps):.3f}]")


if __name__ == "__main__":
    main()
