"""Engine benchmark (GPU): batch-1 latency and 64 x 512 throughput against transformers, same run.

    python benchmarks/engine_bench.py --out benchmarks/results/DATE-h200-engine [--models ...] [--attention fa2,fa3]

Peers and ceilings are measured in the same process. Embeddings are checked against the peer
(cosine >= 0.999) before anything is timed.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from common import (TransformersPeer, cuda_ms, ceilings, environment, linear_params, model_folder, percentiles,
                    random_sequences, time_calls, two_in_flight_s, write_results)
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig

THROUGHPUT_SHAPE = (64, 512)
GRAPHS = GraphConfig(max_graph_tokens=THROUGHPUT_SHAPE[0] * THROUGHPUT_SHAPE[1])


def engine_latency(engine: Engine, sequence: list[int]) -> dict:
    """step() + result() percentiles, and the device time of the forward pass alone (graph replay)."""
    batch = pack([sequence], BucketPolicy())
    latency = percentiles(time_calls(lambda: engine.step(batch).result(), iters=300, warmup=20))
    graph = engine.runner.captured_graph(batch)
    if graph is not None:
        latency["device_forward_ms"] = cuda_ms(graph.replay, 100)
    return latency


def engine_throughput(engine: Engine, sequences: list[list[int]], iters: int = 30) -> float:
    """Tokens/s with two batches in flight."""
    batch = pack(sequences, BucketPolicy())
    return batch.num_tokens / two_in_flight_s(engine, batch, iters)


def peer_numbers(peer: TransformersPeer, one: list[int], many: list[list[int]]) -> dict:
    latency = percentiles(time_calls(lambda: peer([one]), iters=100))
    seconds = np.median(time_calls(lambda: peer(many), iters=10, warmup=3)) / 1e3
    return {"latency_1x128_ms": latency, "tokens_per_s_64x512": sum(map(len, many)) / seconds}


def variants(name: str, head_dim: int, attention: list[str]) -> dict[str, EngineConfig]:
    """Our engine (auto attention) and its ablations: no CUDA graphs, other attention kernels."""
    configs = {"ours": EngineConfig(model=name, device="cuda", graphs=GRAPHS),
               "ours-no-graphs": EngineConfig(model=name, device="cuda", graphs=GraphConfig(enabled=False))}
    for backend in attention if head_dim >= 64 else []:
        configs[f"ours-{backend}"] = EngineConfig(model=name, device="cuda", graphs=GRAPHS, attention=backend)
    return configs


def bench_model(name: str, cache: Path, ceiling: dict, attention: list[str]) -> dict:
    folder = model_folder(name, cache)
    rng = np.random.default_rng(0)
    one, many = random_sequences(rng, 1, 128)[0], random_sequences(rng, *THROUGHPUT_SHAPE)
    flops_per_token = 2 * linear_params(folder)
    result = {"flops_per_token": flops_per_token}
    engine = Engine(EngineConfig(model=str(folder), device="cuda", graphs=GRAPHS))
    peer = TransformersPeer(folder, engine.output.pooling, "cuda")
    ours_pooled = Engine(EngineConfig(model=str(folder), device="cuda", normalize=False)).step(pack(many)).result()
    cos = torch.nn.functional.cosine_similarity(ours_pooled.double(), peer(many).double()).min().item()
    result["min_cosine_vs_peer"] = cos
    assert cos >= 0.999, f"{name}: embeddings disagree with the peer (min cosine {cos:.5f})"
    result["transformers"] = peer_numbers(peer, one, many)
    del peer, engine
    for label, config in variants(str(folder), _head_dim(folder), attention).items():
        engine = Engine(config)
        tps = engine_throughput(engine, many)
        result[label] = {"latency_1x128_ms": engine_latency(engine, one), "tokens_per_s_64x512": tps,
                         "attention": type(engine.attn).__name__ + getattr(engine.attn, "backend", ""),
                         "mfu": tps * flops_per_token / (ceiling["matmul_tflops"] * 1e12)}
        del engine
        torch.cuda.empty_cache()
    return result


def _head_dim(folder: Path) -> int:
    from embedpipe.kernels.models.loader import attention_spec
    from embedpipe.kernels.models.model_folder import read_model_folder
    return attention_spec(read_model_folder(str(folder))).head_dim


def table(results: dict) -> str:
    env, ceiling = results["environment"], results["ceilings"]
    lines = [f"# Engine benchmark, {env['date']}, {env.get('gpu')}, torch {env['torch']}, "
             f"flashinfer {env['flashinfer']}",
             f"Ceilings measured in the same run: {ceiling['matmul_tflops']:.0f} TFLOP/s dense bf16, "
             f"{ceiling['copy_tbps']:.2f} TB/s copy.", "",
             "| model | variant | attention | 1x128 p50 ms | 1x128 p99 ms | 1x128 device ms | 64x512 M tok/s | MFU |",
             "|---|---|---|---|---|---|---|---|"]
    for model, r in results["models"].items():
        for label, v in r.items():
            if not isinstance(v, dict) or "tokens_per_s_64x512" not in v:
                continue
            mfu = v["tokens_per_s_64x512"] * r["flops_per_token"] / (ceiling["matmul_tflops"] * 1e12)
            lines.append(f"| {model} | {label} | {v.get('attention', 'sdpa, padded')} | "
                         f"{v['latency_1x128_ms']['p50']:.3f} | {v['latency_1x128_ms']['p99']:.3f} | "
                         f"{v['latency_1x128_ms'].get('device_forward_ms', float('nan')):.3f} | "
                         f"{v['tokens_per_s_64x512'] / 1e6:.3f} | {mfu:.1%} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    parser.add_argument("--models", default="minilm,bert-base,qwen3-0.6b")
    parser.add_argument("--attention", default="fa2,fa3,torch-varlen",
                        help="other attention backends to time as ablations (fa3 compiles ~2 min a head_dim)")
    args = parser.parse_args()
    results = {"environment": environment(), "ceilings": ceilings("cuda"), "models": {}}
    for name in args.models.split(","):
        results["models"][name] = bench_model(name, args.cache, results["ceilings"],
                                              [a for a in args.attention.split(",") if a])
        write_results(results, args.out, table(results))
        print(table(results), flush=True)


if __name__ == "__main__":
    main()
