"""Suites 1 and 2, in process, pre-tokenised: one request at a time, back to back.

1. low-latency embedding: batch 1 of 128 / 512 / 4096 tokens;
2. low-latency scoring: batches of 5 / 25 / 50 sequences of 512 tokens.

A request's time is host-visible: token ids in, embeddings on the host out (our packing and
the peers' padding included). Variants: ours (CUDA graphs), ours without graphs, and the two
peers. Embeddings are compared with both peers (cosine) before anything is timed.
"""
from __future__ import annotations

import numpy as np

from common import (SentenceTransformersPeer, TransformersPeer, cuda_ms, min_cosine, percentiles,
                    random_sequences, time_calls)
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig

AGREEMENT = 0.999  # min cosine with each peer (0.1%)


def engines(folder, device: str) -> dict[str, Engine]:
    variants = {"ours": EngineConfig(model=str(folder), device=device)}
    if device.startswith("cuda"):  # the CPU engine has no graphs to take away
        variants["ours-no-graphs"] = EngineConfig(model=str(folder), device=device, graphs=GraphConfig(enabled=False))
    return {name: Engine(config) for name, config in variants.items()}


def ours_call(engine: Engine, sequences: list[list[int]]):
    return lambda: engine.step(pack(sequences, BucketPolicy())).result()


def check_agreement(ours: Engine, peers: list, sequences: list[list[int]]) -> dict[str, float]:
    mine = ours.step(pack(sequences, BucketPolicy())).result().float().numpy()
    agreement = {peer.name: min_cosine(mine, peer(sequences).numpy()) for peer in peers}
    for name, cosine in agreement.items():
        if cosine < AGREEMENT:
            raise SystemExit(f"{ours.folder.path}: our embeddings disagree with {name} (min cosine {cosine:.5f})")
    return agreement


def measure(calls: dict, iters: dict, max_seconds: float) -> dict:
    return {name: percentiles(time_calls(call, iters[name], max_seconds=max_seconds)) for name, call in calls.items()}


def run(folder, device: str, sizes, ceiling: dict, weight_bytes: int, flops_per_token: int) -> dict:
    ours = engines(folder, device)
    peers = [TransformersPeer(folder, ours["ours"].output.pooling, device), SentenceTransformersPeer(folder, device)]
    limit = ours["ours"].folder.max_seq_length
    rng = np.random.default_rng(0)
    result = {"agreement": check_agreement(ours["ours"], peers, random_sequences(rng, 4, min(128, limit))),
              "latency": {}, "scoring": {}}
    iters = {**{name: sizes.latency_iters for name in ours}, **{p.name: sizes.peer_iters for p in peers}}
    bandwidth_ms = weight_bytes / (ceiling["copy_tbps"] * 1e12) * 1e3  # reading the weights once
    for length in sizes.latency_tokens:
        if length > limit:
            result["latency"][str(length)] = {"skipped": f"longer than the model's {limit} positions"}
            continue
        one = random_sequences(rng, 1, length)
        calls = {**{n: ours_call(e, one) for n, e in ours.items()}, **{p.name: (lambda p=p: p(one)) for p in peers}}
        row = measure(calls, iters, sizes.measure_seconds)
        for name, stats in row.items():
            stats["weight_bandwidth_fraction"] = bandwidth_ms / stats["p50"]
        if device.startswith("cuda"):
            row["ours"]["device_forward_ms"] = graph_replay_ms(ours["ours"], one)
        result["latency"][str(length)] = row
    for num_seqs in sizes.scoring_batches:
        batch = random_sequences(rng, num_seqs, min(sizes.scoring_tokens, limit))
        calls = {**{n: ours_call(e, batch) for n, e in ours.items()}, **{p.name: (lambda p=p: p(batch)) for p in peers}}
        row = measure(calls, iters, sizes.measure_seconds)
        tokens = num_seqs * len(batch[0])
        for name, stats in row.items():
            stats["mfu"] = tokens * flops_per_token / (stats["p50"] / 1e3) / (ceiling["matmul_tflops"] * 1e12)
        result["scoring"][str(num_seqs)] = row
    result["scoring_tokens"] = min(sizes.scoring_tokens, limit)
    return result


def graph_replay_ms(engine: Engine, sequences: list[list[int]]) -> float | None:
    """Device time of the captured forward pass alone."""
    graph = engine.runner.captured_graph(pack(sequences, BucketPolicy()))
    return cuda_ms(graph.replay, 50) if graph is not None else None
