"""Multi-GPU scaling of `embedpipe index --devices` (and `--ray`) on one host, with the same output as one GPU.

    . benchmarks/gpu_setup.sh
    python benchmarks/multi_gpu_scaling.py [--models bert-base,qwen3-0.6b] [--rows 1000000,400000] [--gpus 1,2,4]
        [--ray local] [--rounds 3]
    python benchmarks/multi_gpu_scaling.py --cpu --rows 20000 --models tiny-bert --gpus 1,2   # tries it on CPU engines

Per model (MiniLM, or a random-weight folder of a shape: common.model_folder): a corpus of
realistic lengths (workloads.py; at most DISTINCT_TEXTS different texts, repeated); then `--devices 0` (the reference),
`--devices 0,1`, `--devices 0,1,2,3` (each count of --gpus this machine has: one engine process per GPU, units from
a shared queue) and, with --ray, Ray Data on every GPU. The runs alternate over --rounds rounds (x1, x2, ...,
Ray, x1, ...), each a fresh `embedpipe index` process after the GPUs are warmed; a figure is the median of the
rounds [min-max], and a speed-up (tokens/s on the job clock, and wall time) is taken round by round against
that round's `--devices 0`, Ray's against that round's `--devices` run on as many GPUs. Every run is checked:
`embedpipe verify OUTPUT --input CORPUS` passes, the unit files hold the reference's (round 1's `--devices 0`)
ids in order with cosine >= 0.9999 per row (bf16: batches are cut
differently), and the index lists the same ids. Reports tokens/s and embeddings/s on the job
clock, wall time, units per engine, each GPU's busy fraction while embedding (nvidia-smi, as
suite_indexing.Sampler samples it), and the speed-ups against the targets
(2 GPUs >= 1.9x, 4 GPUs >= 3.7x; wall 1.8x / 3.4x; Ray within 10% of --devices). Writes results.json,
results.md and scaling.png; exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from common import environment, model_folder, run_process, warm_gpu, write_results
from isolation import ratio, spread
from suite_indexing import Sampler
from workloads import corpus_lengths, texts_of_lengths, write_corpus

MIN_COSINE = 0.9999
SAME = ("same_unit_files", "same_ids", "same_index_ids")  # compare()'s checks against the reference
TARGETS = {2: 1.9, 4: 3.7}  # speed-up over one GPU, job clock
WALL_TARGETS = {2: 1.8, 4: 3.4}
RAY_TARGET = 0.9  # Ray's tokens/s within 10% of --devices on as many GPUs
UNITS = 25  # units per corpus: enough that the shared queue balances the engines
DISTINCT_TEXTS = 100_000  # a larger corpus repeats them (making texts of a known length costs ~0.1 ms each)


def index_command(*args) -> list[str]:
    return [sys.executable, "-m", "embedpipe.cli.main", *map(str, args)]


def unit_rows(rows: int) -> int:
    """Rows per unit of a corpus of `rows`: UNITS units."""
    return -(-rows // UNITS)


def warm_gpus(gpus: int) -> None:
    """GPUs 0 .. gpus - 1 at their steady clocks before a timed run (common.warm_gpu on each)."""
    for device in range(gpus):
        with torch.cuda.device(device):
            warm_gpu()


def run_index(corpus: Path, model: Path, output: Path, engines: list[str], gpus: int) -> dict:
    """The run's numbers, the busy fraction of GPUs 0 .. gpus - 1 while it ran (none: 0) and `verify`'s outcome;
    {"options", "error"} when `embedpipe index` failed."""
    start = time.perf_counter()
    code, _, stderr, (sampler,) = run_process(
        index_command("index", corpus, "--output", output, "--model", model, "--rows-per-unit",
                      unit_rows(pq.read_metadata(corpus).num_rows), "--quiet", *engines),
        None, lambda pid: (Sampler(pid, gpus),))
    wall_s = time.perf_counter() - start
    samples = sampler.stop()
    if code != 0:
        return {"options": " ".join(engines), "error": f"exit {code}: {stderr[-2000:]}"}
    metrics = json.loads((output / "metrics.json").read_text())
    verified = subprocess.run(index_command("verify", output, "--input", corpus), capture_output=True, text=True)
    return {"options": " ".join(engines), "wall_s": wall_s, "num_engines": len(metrics["engines"]),
            "units_per_engine": [engine["units"] for engine in metrics["engines"]],
            "verify_passed": verified.returncode == 0, "verify_output": verified.stdout[-2000:],
            **{key: metrics[key] for key in ("rows", "tokens", "seconds", "tokens_per_s", "embeddings_per_s")},
            **{key: value for key, value in samples.items() if key.startswith("gpu_busy")}}


def compare(output: Path, reference: Path) -> dict:
    """Same unit files, ids and index ids as the reference; the lowest cosine of any row."""
    names = sorted(os.listdir(reference / "embeddings"))
    same_files = sorted(os.listdir(output / "embeddings")) == names
    same_ids, lowest = same_files, 1.0
    for name in names if same_files else []:
        ours, theirs = pq.read_table(output / "embeddings" / name), pq.read_table(reference / "embeddings" / name)
        same_ids &= ours.column(0).equals(theirs.column(0))
        a, b = (np.asarray(t.column("embedding").combine_chunks().flatten(), np.float64).reshape(len(t), -1)
                for t in (ours, theirs))
        lowest = min(lowest, float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min()))
    same_index = pq.read_table(output / "index_ids.parquet").equals(pq.read_table(reference / "index_ids.parquet"))
    return {"same_unit_files": same_files, "same_ids": same_ids, "same_index_ids": same_index, "min_cosine": lowest}


def engine_runs(gpus: list[int], ray: str | None, cpu: bool) -> dict[str, tuple[list[str], int]]:
    """Run name -> (engine options, the GPUs it uses: sampled while it runs): one run per engine count (the first,
    one engine, is the reference), and Ray."""
    available = os.cpu_count() if cpu else torch.cuda.device_count()
    runs = {}
    for count in (n for n in gpus if n <= available):
        runs[f"--devices x{count}"] = (["--devices", f"cpu:{count}" if cpu else ",".join(map(str, range(count)))],
                                       0 if cpu else count)
    if ray is not None:  # Ray keeps a CPU for itself
        runs["--ray"] = (["--ray", ray, "--devices", "cpu:1" if cpu else "all"], 0 if cpu else available)
    return runs


def bench_model(name: str, rows: int, runs: dict[str, tuple[list[str], int]], rounds: int, tmp: Path,
                warm=None) -> dict:
    """Every run, `rounds` times in turn (warm(gpus) before each, when given); each checked against round 1's
    first run."""
    model = model_folder(name, tmp / "models")
    distinct = texts_of_lengths(model, corpus_lengths(min(rows, DISTINCT_TEXTS)))
    # row groups no larger than a unit: a unit is whole row groups, so 4,000 rows in one group were one unit
    corpus = write_corpus([distinct[i % len(distinct)] for i in range(rows)], tmp / f"corpus-{name}.parquet",
                          row_group_size=min(4096, unit_rows(rows)))
    reference = tmp / f"{name}-reference"
    per_run: dict[str, list[dict]] = {run: [] for run in runs}
    for r in range(rounds):
        for i, (run, (engines, gpus)) in enumerate(runs.items()):
            output = reference if r == i == 0 else tmp / f"{name}-{i}-round{r + 1}"
            if warm is not None:
                warm(gpus)
            result = run_index(corpus, model, output, engines, gpus)
            per_run[run].append(result)
            if "error" in result:
                result["ok"] = False
                print(f"{name} {run} round {r + 1}: FAILED {result['error']}", flush=True)
                continue
            if output != reference:
                if not (reference / "index_ids.parquet").exists():
                    result.update(ok=False, error="no reference: the first run failed")
                    continue
                result.update(compare(output, reference))
                shutil.rmtree(output)  # a 1M-row BERT-base output is ~3 GB
            result["ok"] = checked(result)
            print(f"{name} {run} round {r + 1}: {result['tokens_per_s']:,.0f} tokens/s, {result['wall_s']:.1f} s wall, "
                  f"ok {result['ok']}", flush=True)
    summaries = {run: summary(results) for run, results in per_run.items()}
    add_speedups(summaries, per_run, runs)
    return {"rows": rows, "rounds": rounds, "runs": summaries}


def checked(result: dict) -> bool:
    """verify passed, and (a run other than the reference) the same files, ids and index, rows within MIN_COSINE."""
    same = all(result.get(key, True) for key in SAME)
    return result["verify_passed"] and same and result.get("min_cosine", 1.0) >= MIN_COSINE


FIGURES = ("tokens_per_s", "embeddings_per_s", "wall_s", "seconds", "gpu_busy_while_embedding")


def summary(results: list[dict]) -> dict:
    """A run's rounds -> its medians (FIGURES, each GPU's busy fraction), their spread, and the checks of every
    round; a failed round makes the run failed."""
    failed = [r for r in results if "error" in r]
    if failed:
        return {"options": results[0]["options"], "error": failed[0]["error"], "ok": False, "rounds": results}
    out = {"options": results[0]["options"], "num_engines": results[0]["num_engines"],
           "units_per_engine": [r["units_per_engine"] for r in results], "rows": results[0]["rows"],
           "tokens": results[0]["tokens"], "verify_passed": all(r["verify_passed"] for r in results),
           "ok": all(r["ok"] for r in results), "rounds": results,
           "spread": {key: spread([r[key] for r in results]) for key in FIGURES if all(key in r for r in results)}}
    out.update({key: value["median"] for key, value in out["spread"].items()})
    if all("gpu_busy_per_device" in r for r in results):
        out["gpu_busy_per_device"] = [float(np.median(busy))
                                      for busy in zip(*(r["gpu_busy_per_device"] for r in results))]
    compared = [r for r in results if "min_cosine" in r]  # all but the reference (round 1's first run)
    if compared:
        out.update(min_cosine=min(r["min_cosine"] for r in compared),
                   **{key: all(r[key] for r in compared) for key in SAME})
    return out


def add_speedups(summaries: dict, per_run: dict[str, list[dict]], runs: dict[str, tuple[list[str], int]]) -> None:
    """Round by round: each --devices run's speed-up over that round's one GPU (tokens/s and wall), and Ray's
    tokens/s over that round's --devices run on as many GPUs (CPU engines: the one-engine run Ray's cpu:1 matches)."""
    def ratios(run: str, base: str) -> dict | None:
        if base not in summaries or "error" in summaries[base] or "error" in summaries[run]:
            return None  # a base this machine did not run (too few GPUs), or a failed run
        return {"tokens_per_s": ratio(per_run[run], per_run[base], "tokens_per_s", True),
                "wall_s": ratio(per_run[run], per_run[base], "wall_s", False)}

    for run in runs:
        count = re.fullmatch(r"--devices x(\d+)", run)
        if count and count[1] != "1" and (found := ratios(run, "--devices x1")) is not None:
            summaries[run].update(speedup=found["tokens_per_s"], wall_speedup=found["wall_s"],
                                  target=TARGETS.get(int(count[1])), wall_target=WALL_TARGETS.get(int(count[1])))
    if "--ray" in runs:
        gpus = runs["--ray"][1]
        if (found := ratios("--ray", f"--devices x{max(gpus, 1)}")) is not None:
            summaries["--ray"].update(vs_devices=found["tokens_per_s"], wall_vs_devices=found["wall_s"])


def table(models: dict) -> str:
    lines = ["| model | run | engines | units per engine | tokens/s | embeddings/s | wall s | GPU busy | speed-up | "
             "target | wall speed-up | wall target | Ray vs --devices | min cosine | verify | ok |",
             "|" + "---|" * 16]
    for name, m in models.items():
        for run, r in m["runs"].items():
            if "error" in r:
                lines.append(f"| {name} | {run} | failed: {r['error'].splitlines()[-1][:200]} |" + " |" * 13)
                continue
            figure = lambda key, fmt: spread_cell(r["spread"][key], fmt)
            times = lambda key: spread_cell(r[key], ".2f", "x") if key in r else "-"
            target = lambda key: f">= {r[key]}x" if r.get(key) else "-"
            ray = times("vs_devices") + (f" (>= {RAY_TARGET}x)" if "vs_devices" in r else "")
            cosine = f"{r['min_cosine']:.6f}" if "min_cosine" in r else "-"
            units = " ".join(map(str, r["units_per_engine"]))
            lines.append(f"| {name} | {run} | {r['num_engines']} | {units} | {figure('tokens_per_s', ',.0f')} | "
                         f"{figure('embeddings_per_s', ',.0f')} | {figure('wall_s', '.1f')} | {busy_cell(r)} | "
                         f"{times('speedup')} | {target('target')} | {times('wall_speedup')} | "
                         f"{target('wall_target')} | "
                         f"{ray} | {cosine} | {'passed' if r['verify_passed'] else 'FAILED'} | {r['ok']} |")
    return "\n".join(lines) + "\n"


def spread_cell(figure: dict, fmt: str, unit: str = "") -> str:
    """'median[unit] [min-max]' of a figure's rounds; the median alone when they agree (one round)."""
    if figure["min"] == figure["max"]:
        return f"{figure['median']:{fmt}}{unit}"
    return f"{figure['median']:{fmt}}{unit} [{figure['min']:{fmt}}-{figure['max']:{fmt}}]"


def busy_cell(run: dict) -> str:
    """Each GPU's busy fraction while embedding (suite_indexing.busy_figures), or '-' (CPU engines)."""
    per_device = run.get("gpu_busy_per_device", [run["gpu_busy_while_embedding"]] if "gpu_busy_while_embedding" in run
                         else [])
    return " / ".join(f"{busy:.0%}" for busy in per_device) or "-"


def plot(models: dict, folder: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 4))
    counts = set()
    for name, m in models.items():
        points = sorted((int(run.rsplit("x", 1)[1]), r["speedup"]["median"])
                        for run, r in m["runs"].items() if "speedup" in r)
        if points:
            points = [(1, 1.0), *points]  # the reference, one GPU
            ax.plot(*zip(*points), "-o", label=name)
            counts.update(n for n, _ in points)
    if not counts:
        return
    ax.plot(sorted(counts), sorted(counts), ":", color="grey", label="linear")
    ax.set(xlabel="GPUs (--devices)", ylabel="speed-up over one GPU", title="embedpipe index, tokens/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "scaling.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base,qwen3-0.6b", help="minilm, or random-weight shapes")
    parser.add_argument("--rows", default="1000000,400000",
                        help="corpus rows, one value for every model or one per model (enough that the "
                             "engines' start-up, outside the job's clock but inside its wall time, is small)")
    parser.add_argument("--gpus", default="1,2,4", help="engine counts to run (those this machine has)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="also run on Ray Data (local: a new instance)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every run, alternating")
    parser.add_argument("--cpu", action="store_true", help="CPU engines (cpu:N) instead of GPUs, to try the script")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/DATE-scaling")
    args = parser.parse_args()
    out = args.out or Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-scaling"
    runs = engine_runs([int(n) for n in args.gpus.split(",")], args.ray, args.cpu)
    names = args.models.split(",")
    rows = [int(n) for n in args.rows.split(",")]
    rows = rows * len(names) if len(rows) == 1 else rows
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: bench_model(name, count, runs, args.rounds, Path(tmp), None if args.cpu else warm_gpus)
                  for name, count in zip(names, rows, strict=True)}
    results = {"environment": environment(), "command": " ".join(["python", *sys.argv]), "models": models}
    write_results(results, out, table(models))
    plot(models, out)
    print(table(models))
    raise SystemExit(0 if all(r["ok"] for m in models.values() for r in m["runs"].values()) else 1)


if __name__ == "__main__":
    main()
