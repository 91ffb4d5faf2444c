"""GPU check of `index --devices` (and optionally `--ray`): the same output as one engine, and the speed-up.

    . benchmarks/gpu_setup.sh
    python benchmarks/gpu_devices_check.py --model bert-base --rows 200000 [--devices all] [--ray local] [--out DIR]

Takes MiniLM or writes a random-weight model folder of a shape (common.model_folder), writes a
corpus of realistic lengths (workloads.py), then runs
`embedpipe index` as a subprocess three ways on the same input: one engine (`--device cuda`), one
engine process per GPU (`--devices`), and with --ray, a Ray Data pipeline (`--ray ADDRESS --devices
all`, needs `embedpipe[ray]`). Each run's unit files must hold the same ids in the same order and
vectors with cosine >= MIN_COSINE against the single engine's (bf16: batches are cut differently),
and the index must list the same ids. Reports wall time, tokens/s, units per engine and the
scaling efficiency: (tokens/s of N engines) / (N x tokens/s of one). Exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from common import environment, model_folder, write_results
from workloads import corpus_lengths, texts_of_lengths, write_corpus

MIN_COSINE = 0.999
ROWS_PER_UNIT = 8192  # 200k rows -> 25 units: enough that the queue balances the engines


def run_index(corpus: Path, model: Path, output: Path, engines: list[str]) -> dict:
    command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus), "--output", str(output),
               "--model", str(model), "--rows-per-unit", str(ROWS_PER_UNIT), "--quiet", *engines]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall_s = time.perf_counter() - start
    metrics = json.loads((output / "metrics.json").read_text())
    return {"options": " ".join(engines), "wall_s": wall_s, "num_engines": len(metrics["engines"]),
            **{key: metrics[key] for key in ("rows", "tokens", "seconds", "tokens_per_s", "engines")}}


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
    return {"same_unit_files": same_files, "same_ids": same_ids, "same_index_ids": same_index, "min_cosine": lowest,
            "ok": same_files and same_ids and same_index and lowest >= MIN_COSINE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base", help="minilm, or a random-weight shape: bert-base, ...")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--devices", default="all", help="--devices of the multi-engine run")
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="also run on Ray (local: a new instance)")
    parser.add_argument("--cpu", action="store_true", help="only to try the script: cpu, cpu:2 and Ray's cpu:1")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-gpu-devices")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = model_folder(args.model, tmp)
        corpus = write_corpus(texts_of_lengths(model, corpus_lengths(args.rows)), tmp / "corpus.parquet")
        runs = {"one engine": (["--device", "cpu" if args.cpu else "cuda"], tmp / "one")}
        runs["--devices"] = (["--devices", "cpu:2" if args.cpu else args.devices], tmp / "devices")
        if args.ray:
            runs["--ray"] = (["--ray", args.ray, "--devices", "cpu:1" if args.cpu else "all"], tmp / "ray")
        results = {name: run_index(corpus, model, output, engines) for name, (engines, output) in runs.items()}
        single = results["one engine"]["tokens_per_s"]
        for name, (_, output) in list(runs.items())[1:]:
            result = results[name]
            result.update(compare(output, tmp / "one"))
            result["scaling_efficiency"] = result["tokens_per_s"] / (result["num_engines"] * single)
    table = ("| run | engines | wall s | tokens/s | scaling efficiency | same output |\n|---|---|---|---|---|---|\n"
             + "".join(f"| {name} | {r['num_engines']} | {r['wall_s']:.1f} | {r['tokens_per_s']:,.0f} | "
                       f"{r.get('scaling_efficiency', 1):.2f} | {r.get('ok', '-')} |\n" for name, r in results.items()))
    write_results({"environment": environment(), "model": args.model, "rows": args.rows, "runs": results},
                  args.out, table)
    print(json.dumps(results, indent=1))
    print(table)
    raise SystemExit(0 if all(r.get("ok", True) for r in results.values()) else 1)


if __name__ == "__main__":
    main()
