"""Where a replayed batch-1 step's device time goes, kernel by kernel (GPU): the whole-model graph of one batch,
replayed under torch.profiler, its kernels' start and end read off the device's clock.

    python benchmarks/replay_timeline.py --out DIR [--models bert-base,qwen3-0.6b] [--lengths 128] [--attention triton]

For each model and length: the replay's span (first kernel's start to last kernel's end), and per kernel name (in
the order they first run) the count per replay, the median duration and the median gap before it (its start minus
the previous kernel's end: negative where programmatic dependent launch let it start early, its programs waiting
at their gdc_wait). Per kernel class (batch1_profile.KERNEL_CLASSES) the sums of both. Writes DIR/replay-timeline.json
and prints a table per model as it goes.
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from batch1_profile import kernel_class
from common import environment, model_folder, random_sequences, warm_gpu
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig

REPLAYS = 30


def kernel_spans(prof) -> list[tuple[str, float, float]]:
    """(name, start us, end us) of every kernel the profiler saw, in start order."""
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in e.name.lower()
             and "memset" not in e.name.lower()]
    return sorted(spans, key=lambda s: s[1])


def replay_timeline(engine: Engine, batch) -> dict:
    """The replayed graph of `batch` profiled REPLAYS times, one replay at a time (synchronised apart)."""
    for _ in range(5):  # eager, capture, replays
        engine.step(batch).result()
    graph = engine.runner.captured_graph(batch)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            graph.replay()
            torch.cuda.synchronize()
    spans = kernel_spans(prof)
    per_replay = len(spans) // REPLAYS
    if per_replay == 0 or len(spans) % REPLAYS:
        raise RuntimeError(f"{len(spans)} kernels over {REPLAYS} replays: not a whole count each")
    replays = [spans[i * per_replay:(i + 1) * per_replay] for i in range(REPLAYS)]
    durations, gaps = np.zeros((REPLAYS, per_replay)), np.zeros((REPLAYS, per_replay))
    for r, kernels in enumerate(replays):
        for i, (_, start, end) in enumerate(kernels):
            durations[r, i] = end - start
            gaps[r, i] = start - kernels[i - 1][2] if i else 0.0
    names = [name for name, _, _ in replays[0]]
    by_name: dict[str, dict] = {}
    for i, name in enumerate(names):
        row = by_name.setdefault(name[:90], {"count": 0, "duration_us": [], "gap_before_us": []})
        row["count"] += 1
        row["duration_us"].append(float(np.median(durations[:, i])))
        row["gap_before_us"].append(float(np.median(gaps[:, i])))
    kernels = [{"kernel": name, "class": kernel_class(name), "count": row["count"],
                "median_duration_us": statistics.median(row["duration_us"]),
                "total_duration_us": sum(row["duration_us"]), "total_gap_before_us": sum(row["gap_before_us"])}
               for name, row in by_name.items()]
    classes = defaultdict(lambda: {"duration_us": 0.0, "gap_before_us": 0.0, "count": 0})
    for k in kernels:
        c = classes[k["class"]]
        c["duration_us"] += k["total_duration_us"]
        c["gap_before_us"] += k["total_gap_before_us"]
        c["count"] += k["count"]
    replay_spans = [kernels_[-1][2] - kernels_[0][1] for kernels_ in replays]
    return {"kernels_per_replay": per_replay, "span_us": statistics.median(replay_spans),
            "span_min_max_us": [min(replay_spans), max(replay_spans)],
            "sum_durations_us": float(np.median(durations.sum(axis=1))),
            "sum_gaps_us": float(np.median(gaps.sum(axis=1))), "by_class": dict(classes), "kernels": kernels}


def print_timeline(title: str, t: dict) -> None:
    print(f"\n## {title}: span {t['span_us']:.1f} us, {t['kernels_per_replay']} kernels, durations "
          f"{t['sum_durations_us']:.1f} us, gaps {t['sum_gaps_us']:.1f} us", flush=True)
    for name, c in sorted(t["by_class"].items(), key=lambda kv: -kv[1]["duration_us"]):
        print(f"  {name:10s} x{c['count']:4d} {c['duration_us']:8.1f} us  gaps before {c['gap_before_us']:7.1f} us")
    for k in t["kernels"]:
        print(f"  {k['median_duration_us']:6.2f} us x{k['count']:3d}  gaps {k['total_gap_before_us']:7.1f}  "
              f"{k['kernel'][:80]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="bert-base,qwen3-0.6b")
    parser.add_argument("--lengths", default="128")
    parser.add_argument("--attention", default="triton")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {"environment": environment(), "clocks": warm_gpu(1.0), "models": {}}
    for name in args.models.split(","):
        with torch.device("cuda"):  # random weights initialised on the device
            folder = model_folder(name, args.cache)
        engine = Engine(EngineConfig(model=str(folder), device="cuda", attention=args.attention))
        for length in (int(n) for n in args.lengths.split(",")):
            batch = pack(random_sequences(np.random.default_rng(0), 1, length), BucketPolicy())
            timeline = results["models"].setdefault(name, {})[f"1x{length}"] = replay_timeline(engine, batch)
            print_timeline(f"{name} 1x{length}", timeline)
        del engine
        torch.cuda.empty_cache()
        (args.out / "replay-timeline.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
