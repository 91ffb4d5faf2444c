"""Batch-1 latency, taken apart (GPU): host time per step, device time per kernel class, and each
projection's GEMM under cuBLAS, cuBLASLt and a skinny Triton GEMM (skinny_gemm.py).

    python benchmarks/batch1_profile.py --out DIR [--models minilm-l6,bert-base,qwen3-0.6b] [--attention auto]
        [--no-gemm]

Writes DIR/batch1-profile.json and prints a table per model as it goes.
"""
from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import triton
from torch.profiler import ProfilerActivity, profile

from common import cuda_ms, environment, graphed_ms, host_call_ms, model_folder, percentiles, random_sequences
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig

SHAPES = {"one-query-16": 16, "one-128": 128}
KERNEL_CLASSES = (("attention", ("flash", "fmha", "attention", "prefill", "BatchPrefill")),
                  ("gemm", ("gemm", "sm90", "cutlass", "cublas", "nvjet", "splitK", "skinny")),
                  ("norm", ("layer_norm", "rms_norm")), ("rope", ("rope",)), ("activation", ("gelu", "silu")),
                  ("pool", ("pool",)), ("copy", ("Memcpy", "copy", "Memset", "fill")))


def kernel_class(name: str) -> str:
    return next((c for c, keys in KERNEL_CLASSES if any(k.lower() in name.lower() for k in keys)), "other")


def device_profile(engine: Engine, batch) -> dict:
    """Kernel time per class of one eager forward pass (graphs off), and the kernels' names."""
    for _ in range(3):
        engine.step(batch).result()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.step(batch).result()
    classes, kernels = defaultdict(float), []
    for e in prof.key_averages():
        if e.device_time_total > 0:
            classes[kernel_class(e.key)] += e.device_time_total / 1e3
            kernels.append((round(e.device_time_total / 1e3, 4), e.count, e.key[:100]))
    return {"ms_by_class": dict(classes), "num_kernels": sum(k[1] for k in kernels),
            "kernels": sorted(kernels, reverse=True)[:25]}


@torch.inference_mode()  # as Engine.step: FlashInfer's plan writes the engine's (inference) buffers
def host_times(engine: Engine, batch, iters: int = 300) -> dict:
    """p50 ms of: step() until it returns, step() + result(), and the host pieces of a replayed step."""
    for _ in range(20):
        engine.step(batch).result()
    launch, total = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        lazy = engine.step(batch)
        t1 = time.perf_counter()
        lazy.result()
        t2 = time.perf_counter()
        launch.append((t1 - t0) * 1e3)
        total.append((t2 - t1 + t1 - t0) * 1e3)
    pieces = {}
    key = engine.attn.graph_key(batch)
    cu = torch.empty(batch.cu_seqlens.shape, dtype=torch.int32).pin_memory()
    cu.copy_(batch.cu_seqlens)
    dev_cu = cu.to("cuda")
    pieces["plan"] = host_call_ms(lambda: engine.attn.plan(cu, batch.num_seqs, key, dev_cu))
    graph = engine.runner.captured_graph(batch)
    pieces["graph_replay_launch"] = host_call_ms(graph.replay)
    # a replay alone, from the host's call to its return from synchronize(): the least a step can take
    pieces["lone_replay"] = host_call_ms(lambda: (graph.replay(), torch.cuda.synchronize()))
    torch.cuda.synchronize()
    return {"step_returns_ms": percentiles(launch), "step_and_result_ms": percentiles(total),
            "host_piece_p50_ms": pieces, "device_replay_ms": cuda_ms(graph.replay, 200),
            "step_phase_p50_ms": phase_times(engine, batch)}


PHASES = ("staging_take", "stage_inputs", "graph_key", "copy_in", "plan", "graph_replay",
          "record", "download", "wait_result")


@torch.inference_mode()
def phase_times(engine: Engine, batch, iters: int = 300) -> dict[str, float]:
    """p50 ms of each phase of a replayed CudaRunner.step (its code, timed line by line) and of result()."""
    from embedpipe.kernels.cuda.runner import stage_inputs
    runner, samples = engine.runner, defaultdict(list)
    num_tokens, num_slots = batch.key
    rows = num_tokens + num_slots + 1
    for _ in range(iters):
        t = [time.perf_counter()]
        slot, host = runner.staging.take(rows)
        t.append(time.perf_counter())
        stage_inputs(batch, runner.staging.array(slot, rows))
        host_cu = runner.staging.view(slot, num_tokens, rows)
        t.append(time.perf_counter())
        key = runner.attn.graph_key(batch)
        t.append(time.perf_counter())
        graph, inputs_buf, out_buf, device_cu = runner.graphs.entries[key]
        inputs_buf.copy_(host, non_blocking=True)
        t.append(time.perf_counter())
        runner.attn.plan(host_cu, batch.num_seqs, key, device_cu)
        t.append(time.perf_counter())
        graph.replay()
        t.append(time.perf_counter())
        runner.staging.events[slot].record(runner.stream)
        t.append(time.perf_counter())
        lazy = runner._download(out_buf, batch.num_seqs)
        t.append(time.perf_counter())
        lazy.result()
        t.append(time.perf_counter())
        for name, a, b in zip(PHASES, t, t[1:]):
            samples[name].append((b - a) * 1e3)
    return {name: float(np.median(v)) for name, v in samples.items()}


def linear_shapes(engine: Engine) -> dict[str, tuple[int, int, bool]]:
    """name -> (N, K, has bias) of the first layer's projections."""
    shapes = {}
    for name, module in engine.model.named_modules():
        if isinstance(module, torch.nn.Linear) and (".0." in name or name.startswith("0.")):
            shapes[name] = (module.out_features, module.in_features, module.bias is not None)
    return shapes


def gemm_table(shapes: dict, ms: tuple[int, ...]) -> list[dict]:
    from skinny_gemm import SkinnyConfig, skinny_linear
    rows = []
    for (name, (n, k, has_bias)), m in itertools.product(shapes.items(), ms):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if has_bias else None
        ref = F.linear(x, w, b)
        row = {"layer": name, "M": m, "N": n, "K": k, "weight_mb": 2 * n * k / 1e6}
        for lib in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(lib)
            row[lib] = graphed_ms(lambda: F.linear(x, w, b))
        torch.backends.cuda.preferred_blas_library("cublas")
        best = None
        for bn, bk, split, stages in itertools.product((32, 64, 128), (64, 128), (1, 2, 4, 8), (3, 4)):
            config = SkinnyConfig(bn, bk, split, 4, stages)
            if not config.fits(k):
                continue
            try:
                err = (skinny_linear(x, w, b, config).float() - ref.float()).abs().max().item()
            except triton.runtime.errors.OutOfResources:
                continue
            if err > 0.05 * ref.float().abs().max().item():
                row.setdefault("wrong", []).append(str(config))
                continue
            t = graphed_ms(lambda: skinny_linear(x, w, b, config))
            if best is None or t < best[0]:
                best = (t, config)
        row["triton_best"], row["triton_config"] = best[0], str(best[1])
        row["weight_tbps_best"] = row["weight_mb"] / 1e6 / (min(row["cublas"], row["cublaslt"], best[0]) / 1e3)
        rows.append(row)
        print(f"{name:40s} M={m:4d} N={n:5d} K={k:5d} cublas {row['cublas'] * 1e3:6.1f} us  "
              f"lt {row['cublaslt'] * 1e3:6.1f} us  triton {best[0] * 1e3:6.1f} us {best[1]}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="minilm-l6,bert-base,qwen3-0.6b")
    parser.add_argument("--attention", default="auto")
    parser.add_argument("--no-gemm", action="store_true", help="skip the per-projection GEMM table")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"environment": environment(), "models": {}}
    folders = {}
    # Two passes: every host time before the first profile. Once torch.profiler has run in a process its CUDA
    # callbacks stay, and every API call after pays them: a BERT-base graph's launch took 26-47 us against 3 us
    # before (H200, results/2026-12-06-h200-launch, call 7 against call 5).
    for name in args.models.split(","):
        with torch.device("cuda"):  # random weights initialised on the device: seconds, not minutes
            folders[name] = model_folder(name, args.cache)
        entry = results["models"][name] = {}
        engine = Engine(EngineConfig(model=str(folders[name]), device="cuda", attention=args.attention))
        entry["attention"] = engine.attention
        for shape, length in SHAPES.items():
            entry[shape] = host_times(engine, _batch(length))
            print(name, shape, json.dumps(entry[shape]), flush=True)
        del engine
        torch.cuda.empty_cache()
    for name, folder in folders.items():
        entry = results["models"][name]
        eager = Engine(EngineConfig(model=str(folder), device="cuda", attention=args.attention,
                                    graphs=GraphConfig(enabled=False)))
        for shape, length in SHAPES.items():
            entry[shape]["eager_profile"] = device_profile(eager, _batch(length))
            print(name, shape, json.dumps(entry[shape]["eager_profile"]["ms_by_class"]), flush=True)
        if not args.no_gemm:
            entry["gemm"] = gemm_table(linear_shapes(eager), (64, 128))
        del eager
        torch.cuda.empty_cache()
        (args.out / "batch1-profile.json").write_text(json.dumps(results, indent=2))


def _batch(length: int):
    return pack(random_sequences(np.random.default_rng(0), 1, length), BucketPolicy())


if __name__ == "__main__":
    main()
