"""What launching a replayed whole-model graph costs the host, and why (GPU).

A batch-1 step waits for its graph's launch before the device starts. batch1_profile.py once saw
`CUDAGraph.replay()` return after 3 us at 1 x 16 tokens but 26-49 us for other graphs of the same kernels: it had
timed them after a torch.profiler run in the same process, whose callbacks every later CUDA call pays. Timed here,
no profiler in the process, every graph launched in 3-7 us (H200, results/2026-12-06-h200-launch, call 5). Per
model, length and variant this captures the engine's graph again in CUDA's debug mode and counts its nodes by type
and its edges by kind (the DOT dump), then times on the host, the device idle before each call (p50 us):
- `replay`: torch's CUDAGraph.replay() (it refills the default generator's RNG state first: two small kernels);
- `launch`: cuGraphLaunch of the same executable, nothing else;
- `launch_plain`: cuGraphLaunch of the graph instantiated again with no flags (torch asks for auto-free-on-launch);
- `replay_busy`: replay() queued behind 20 others (the device busy);
and the replayed graph's device time. Variants switch one mechanism off before the engine is built: `no-pdl`
(pdl.MAX_TOKENS = 0), `no-split-k` (triton_split_k.TOKEN_RANGE = None), `cublas-qkv` (the plain projections on
cuBLAS: triton_linear.TOKEN_RANGES["identity"] = None). Call 5 ran before the small plain projections went to
Triton; its `qkv` variant set TOKEN_RANGES["identity"] = (1, 256) with no weight bound.

    python benchmarks/graph_launch.py --out DIR [--models bert-base,qwen3-0.6b] [--lengths 16,128]
        [--variants base,no-pdl,no-split-k]

Writes DIR/graph-launch.json, the DOT dumps (DIR/dot/*.dot.gz) and prints a line per case as it goes.
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from common import cuda_ms, environment, host_call_ms, model_folder, random_sequences, warm_gpu
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.cuda import pdl, triton_linear, triton_split_k
from embedpipe.kernels.engine import Engine, EngineConfig

NODE_TYPES = ("KERNEL", "MEMCPY", "MEMSET", "HOST", "GRAPH", "EMPTY", "WAIT_EVENT", "EVENT_RECORD", "MEM_ALLOC",
              "MEM_FREE", "BATCH_MEM_OP", "CONDITIONAL", "EXT_SEMAS_SIGNAL", "EXT_SEMAS_WAIT")
# the settings the variants change, as imported
DEFAULTS = {"pdl": pdl.MAX_TOKENS, "split_k": triton_split_k.TOKEN_RANGE,
            "identity": triton_linear.TOKEN_RANGES["identity"]}


def set_variant(name: str) -> None:
    """Module settings of a variant; `base` restores the defaults they had at import."""
    pdl.MAX_TOKENS, triton_split_k.TOKEN_RANGE = DEFAULTS["pdl"], DEFAULTS["split_k"]
    triton_linear.TOKEN_RANGES["identity"] = DEFAULTS["identity"]
    if name == "no-pdl":
        pdl.MAX_TOKENS = 0
    elif name == "no-split-k":
        triton_split_k.TOKEN_RANGE = None
    elif name == "cublas-qkv":
        triton_linear.TOKEN_RANGES["identity"] = None
    elif name != "base":
        raise SystemExit(f"unknown variant {name!r}")


class Driver:
    """cuGraphLaunch and cudaGraphInstantiateWithFlags through ctypes (the handles torch hands out are the driver's)."""

    def __init__(self):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.cuda.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.cuda.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                                          ctypes.c_ulonglong]

    def launch(self, graph_exec: int, stream: int) -> None:
        rc = self.cuda.cuGraphLaunch(graph_exec, stream)
        if rc:
            raise RuntimeError(f"cuGraphLaunch: CUresult {rc}")

    def instantiate(self, graph: int, flags: int = 0) -> int:
        out = ctypes.c_void_p()
        rc = self.cuda.cuGraphInstantiateWithFlags(ctypes.byref(out), graph, flags)
        if rc:
            raise RuntimeError(f"cuGraphInstantiateWithFlags: CUresult {rc}")
        return out.value


def host_us(fn, queued: int = 0) -> float:
    return host_call_ms(fn, queued=queued) * 1e3


def dot_counts(text: str) -> dict:
    """Nodes by type and edges by kind of a cudaGraphDebugDotPrint dump."""
    nodes = Counter()
    for label in re.findall(r'label="([^"]*)"', text):
        kind = next((t for t in NODE_TYPES if re.search(rf"\b{t}\b", label)), None)
        if kind:
            nodes[kind] += 1
    edges = [line for line in text.splitlines() if "->" in line]
    programmatic = sum("rogrammatic" in line or "PROGRAMMATIC" in line for line in edges)
    return {"nodes": dict(nodes), "edges": len(edges), "programmatic_edges": programmatic}


@torch.inference_mode()
def measure(engine: Engine, batch, driver: Driver, dot_path: Path) -> dict:
    for _ in range(5):  # eager, capture, replays
        engine.step(batch).result()
    runner = engine.runner
    graph, inputs_buf, *_ = runner.graphs.entries[engine.attn.graph_key(batch)]
    stream = torch.cuda.current_stream().cuda_stream
    out = {"replay": host_us(graph.replay), "replay_busy": host_us(graph.replay, queued=20),
           "device_ms": cuda_ms(graph.replay, 200)}
    graph_exec = graph.raw_cuda_graph_exec()
    out["launch"] = host_us(lambda: driver.launch(graph_exec, stream))
    # the same forward captured again, its graph kept for the dump and a plain instantiation
    debug = torch.cuda.CUDAGraph(keep_graph=True)
    debug.enable_debug_mode()
    with torch.cuda.graph(debug, pool=runner.pool):
        runner._forward(inputs_buf, batch)
    debug.debug_dump(str(dot_path))
    text = dot_path.read_text()
    with gzip.open(f"{dot_path}.gz", "wt") as f:
        f.write(text)
    dot_path.unlink()
    out |= dot_counts(text)
    plain = driver.instantiate(debug.raw_cuda_graph())
    driver.launch(plain, stream)  # the first launch uploads it
    out["launch_plain"] = host_us(lambda: driver.launch(plain, stream))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="bert-base,qwen3-0.6b")
    parser.add_argument("--lengths", default="16,128")
    parser.add_argument("--variants", default="base,no-pdl,no-split-k")
    parser.add_argument("--attention", default="triton")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    args = parser.parse_args()
    (args.out / "dot").mkdir(parents=True, exist_ok=True)
    driver = Driver()
    results = {"environment": environment(), "clocks": warm_gpu(2.0), "cases": []}
    for name in args.models.split(","):
        with torch.device("cuda"):
            folder = model_folder(name, args.cache)
        for variant in args.variants.split(","):
            set_variant(variant)
            engine = Engine(EngineConfig(model=str(folder), device="cuda", attention=args.attention))
            for length in map(int, args.lengths.split(",")):
                batch = pack(random_sequences(np.random.default_rng(0), 1, length), BucketPolicy())
                case = {"model": name, "variant": variant, "length": length}
                try:
                    case |= measure(engine, batch, driver, args.out / "dot" / f"{name}-{variant}-{length}.dot")
                except Exception as e:  # noqa: BLE001 - a case that fails is recorded, the others still run
                    case["error"] = f"{type(e).__name__}: {e}"
                results["cases"].append(case)
                print(json.dumps(case), flush=True)
                (args.out / "graph-launch.json").write_text(json.dumps(results, indent=1))
            del engine
            torch.cuda.empty_cache()
    set_variant("base")


if __name__ == "__main__":
    main()
