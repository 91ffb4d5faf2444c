"""Suites 1 and 2, pre-tokenised, one request at a time, back to back, each system in its own fresh process.

1. low-latency embedding: batch 1 of 128 / 512 / 4096 tokens;
2. low-latency scoring: batches of 5 / 25 / 50 sequences of 512 tokens.

A request's time is host-visible: token ids in, embeddings on the host out (our packing and the peers' padding
included). Systems: ours (its ablation without CUDA graphs in the same process), transformers (AutoModel, SDPA,
one padded batch) and sentence-transformers (its modules on padded batches of 32), all in the run dtype. Each
round starts one fresh worker per system (isolation.py); the workers of every round load at once, untimed, then
run one at a time (ours, transformers, sentence-transformers, ours, ...), each after warming the GPU. They read
the same token ids from one file and return their samples and the vectors of a common batch, compared by cosine
(>= 0.999). A figure is the median of the rounds' values with their range; "vs" ratios are taken round by round.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from common import (SentenceTransformersPeer, TransformersPeer, cuda_ms, min_cosine, percentiles, random_sequences,
                    time_calls)
from isolation import ratio, round_robin, same_process_check, start_workers, stop_workers, summarize

SYSTEMS = ("ours", "transformers", "sentence-transformers")
PEERS = SYSTEMS[1:]
AGREEMENT = 0.999  # min cosine with each peer (0.1%)


# ---- in the worker process
def prepare(task: dict) -> dict:
    """The system, loaded: {"calls": {variant: call(sequences) -> [num_seqs, hidden] float32 array}, "engine"}."""
    folder, device, system = Path(task["folder"]), task["device"], task["system"]
    if system != "ours":
        peer = (TransformersPeer(folder, task["pooling"], device) if system == "transformers"
                else SentenceTransformersPeer(folder, device))
        return {"calls": {system: lambda seqs: peer(seqs).numpy()}, "engine": None}
    from embedpipe.kernels.engine import Engine, EngineConfig
    from embedpipe.kernels.graph_cache import GraphConfig
    engines = {"ours": Engine(EngineConfig(model=str(folder), device=device))}
    if device.startswith("cuda"):  # the CPU engine has no graphs to take away
        engines["ours-no-graphs"] = Engine(EngineConfig(model=str(folder), device=device,
                                                        graphs=GraphConfig(enabled=False)))
    return {"calls": {name: ours_call(e) for name, e in engines.items()}, "engine": engines["ours"]}


def ours_call(engine):
    """Our timed call: token ids in (packed inside the call), embeddings on the host out, as a float32 array."""
    from embedpipe.kernels.batch import BucketPolicy, pack
    policy = BucketPolicy()  # made once, as a caller does
    return lambda seqs: engine.step(pack(seqs, policy)).result().float().numpy()


def measure(state: dict, task: dict) -> tuple[dict, dict]:
    """Percentiles of every series for every variant; the agreement batch's vectors (computed first, untimed)."""
    inputs, sizes, calls = json.loads(Path(task["inputs"]).read_text()), task["sizes"], state["calls"]
    vectors = {name: call(inputs["agreement"]) for name, call in calls.items()}
    ours = task["system"] == "ours"
    iters, seconds = (sizes["latency_iters"], sizes["measure_seconds"]) if ours else (sizes["peer_iters"],
                                                                                      sizes["peer_seconds"])
    cuda = task["device"].startswith("cuda")
    warmup = 5 if ours and cuda else 2  # on CUDA ours runs a key eagerly, captures it, then replays
    min_samples = 20 if ours else sizes["peer_min_samples"]
    result = {"latency": {}, "scoring": {}}
    for group in result:
        for size, sequences in inputs[group].items():
            row = result[group][size] = {}
            for name, call in calls.items():
                row[name] = percentiles(time_calls(lambda: call(sequences), iters, warmup, seconds, min_samples))
            if ours and group == "latency" and cuda:
                row["ours"]["device_forward_ms"] = graph_replay_ms(state["engine"], sequences)
    return result, vectors


def graph_replay_ms(engine, sequences: list[list[int]]) -> float | None:
    """Device time of the captured forward pass alone."""
    from embedpipe.kernels.batch import BucketPolicy, pack
    graph = engine.runner.captured_graph(pack(sequences, BucketPolicy()))
    return cuda_ms(graph.replay, 50) if graph is not None else None


# ---- in the coordinator
def write_inputs(path: Path, sizes, max_tokens: int) -> dict:
    """The token ids every system reads: an agreement batch, one sequence per latency length, the scoring batches."""
    rng = np.random.default_rng(0)
    inputs = {"agreement": random_sequences(rng, 4, min(128, max_tokens)),
              "latency": {str(n): random_sequences(rng, 1, n) for n in sizes.latency_tokens if n <= max_tokens},
              "scoring": {str(n): random_sequences(rng, n, min(sizes.scoring_tokens, max_tokens))
                          for n in sizes.scoring_batches}}
    path.write_text(json.dumps(inputs))
    return inputs


class LatencyRun:
    """Starts every round's workers at once (`__init__`, not waiting); `ready()` waits for them; `measure()` runs
    the rounds and summarises."""

    def __init__(self, ctx):
        self.ctx, folder = ctx, ctx.work / f"latency-{ctx.name}"
        folder.mkdir(parents=True, exist_ok=True)
        inputs = folder / "inputs.json"
        self.inputs = write_inputs(inputs, ctx.sizes, ctx.info["max_tokens"])
        task = {"module": "suite_latency", "folder": str(ctx.folder), "device": ctx.device, "inputs": str(inputs),
                "pooling": ctx.info["pooling"], "sizes": ctx.sizes_dict}
        self.tasks = [(f"{s}-{r}", {**task, "system": s}) for r in range(ctx.sizes.rounds) for s in SYSTEMS]
        self.folder, self.workers = folder, {}

    def ready(self) -> None:
        self.workers = start_workers(self.tasks, self.folder, self.ctx.deadline)

    def measure(self) -> dict:
        ctx = self.ctx
        rounds, cut = round_robin(list(SYSTEMS), ctx.sizes.rounds, self.run_one, ctx.deadline, "latency")
        self.stop()
        return summary(rounds, cut, self.inputs, ctx)

    def run_one(self, system: str, r: int) -> tuple[dict, dict]:
        start = time.perf_counter()
        result = self.workers[f"{system}-{r}"].run(self.ctx.deadline)
        print(f"  round {r} {system:22s} {time.perf_counter() - start:5.1f} s", flush=True)
        return result

    def stop(self) -> None:
        stop_workers(self.workers)


def check_agreement(rounds: dict) -> dict[str, float]:
    """Min cosine of our vectors (round 0) with each peer's, as the processes returned them."""
    ours = rounds["ours"][0][1]["ours"]
    agreement = {peer: min_cosine(ours, rounds[peer][0][1][peer]) for peer in PEERS}
    for peer, cosine in agreement.items():
        if cosine < AGREEMENT:
            raise SystemExit(f"our embeddings disagree with {peer} (min cosine {cosine:.5f})")
    return agreement


def summary(rounds: dict, cut: str | None, inputs: dict, ctx) -> dict:
    """Per series and variant: the rounds' percentiles summarised, and ours vs each peer, round by round."""
    results = {system: [r for r, _ in values] for system, values in rounds.items()}
    pids = {system: [r["pid"] for r in values] for system, values in results.items()}
    same_process_check(pids)
    out = {"agreement": check_agreement(rounds), "rounds": len(results["ours"]), "pids": pids,
           "clocks": {s: [{"before": r["clocks_before"], "after": r["clocks_after"]} for r in values]
                      for s, values in results.items()},
           "scoring_tokens": len(next(iter(inputs["scoring"].values()))[0]),
           "skipped_lengths": {str(n): f"longer than the model's {ctx.info['max_tokens']} positions"
                               for n in ctx.sizes.latency_tokens if str(n) not in inputs["latency"]}}
    if cut:
        out["rounds_cut"] = cut
    bandwidth_ms = ctx.info["weight_bytes"] / (ctx.ceiling["copy_tbps"] * 1e12) * 1e3  # reading the weights once
    for group in ("latency", "scoring"):
        out[group] = {}
        for size in inputs[group]:
            per_variant = {name: [r[group][size][name] for r in values]
                           for values in results.values() for name in values[0][group][size]}
            row = out[group][size] = {name: summarize(stats) for name, stats in per_variant.items()}
            row["vs"] = {peer: ratio(per_variant["ours"], per_variant[peer], "p50", False) for peer in PEERS}
            for name in per_variant:
                p50 = row[name]["p50"]["median"]
                if group == "latency":
                    row[name]["weight_bandwidth_fraction"] = bandwidth_ms / p50
                else:
                    tokens = len(inputs[group][size]) * len(inputs[group][size][0])
                    row[name]["mfu"] = (tokens * ctx.info["flops_per_token"] / (p50 / 1e3)
                                        / (ctx.ceiling["matmul_tflops"] * 1e12))
    return out
