"""The host side of `embedpipe index` alone: the real job, with an engine whose step() costs nothing.

    python benchmarks/host_pipeline.py [--rows 60000] [--workers 1 2] [--out DIR] [--py-spy]
    python benchmarks/host_pipeline.py --quick          # CI: small, checks only that it runs

Each run is its own fresh process (`--child`): it swaps the engine for NullEngine (the model's real
output shape and dtype, zeros, no device work), runs the whole job as `embedpipe index` does
(listing, workers reading and tokenizing, batching, writing unit files, the FAISS index) and
reports, from getrusage around the job:
- main-process CPU µs per row (every thread of the process: it is what caps a GPU's feed),
- worker CPU µs per token (the tokenizer processes, reaped at the job's end),
- rows/s and tokens/s on the job's clock (metrics.json) and on the wall.
With --py-spy, the main process is sampled (py-spy record) into the results folder.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from workloads import corpus_lengths, vocabulary_words  # noqa: E402

TOKENS_PER_WORD = 1.0  # random vocabulary words of 3+ letters: about one MiniLM token each (measured: 1.02)
MAX_SEQS = 1024  # BucketPolicy's largest sequence bucket  # random vocabulary words of 3+ letters: about this many
                 # MiniLM tokens each


def random_corpus(path: Path, num_rows: int, model_folder: Path, seed: int = 0) -> Path:
    """A Parquet corpus of random words, log-normal lengths (median ~64 tokens), row groups of 4096."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, words = vocabulary_words(model_folder)
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, (np.array(corpus_lengths(num_rows, seed)) / TOKENS_PER_WORD).astype(int))
    picked = words[rng.integers(0, len(words), size=int(lengths.sum()))]
    ends = np.cumsum(lengths)
    texts = [" ".join(picked[end - n:end]) for n, end in zip(lengths.tolist(), ends.tolist())]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": np.arange(num_rows, dtype=np.int64), "text": texts}), path, row_group_size=4096)
    return path


class NullEngine:
    """Engine's interface for the job (output, device, counters, attention, max_in_flight, step) with no model
    behind it."""

    def __init__(self, config):
        import torch

        from embedpipe.kernels.engine import model_spec
        from embedpipe.kernels.graph_cache import GraphCounters

        self.config, self.spec = config, model_spec(config)
        self.folder, self.output = self.spec.folder, self.spec.output
        self.device = torch.device("cpu")
        self.counters = GraphCounters()
        self.warm_up_s = None  # load_engine's stand-in: nothing to warm up
        self.attention = "none (no model)"
        self.max_in_flight = config.max_in_flight
        # one buffer for every result: a CUDA engine's results arrive in pinned buffers it allocated once
        self._zeros = torch.zeros((MAX_SEQS, self.output.width), dtype=self.output.torch_dtype)

    def step(self, batch):
        from embedpipe.kernels.lazy_tensor import LazyTensor

        return LazyTensor(self._zeros[:batch.num_seqs])


def child(args) -> None:
    """Runs one job with NullEngine and prints its figures as one JSON line."""
    from embedpipe.pipeline.index import job as job_module
    from embedpipe.pipeline.config import IndexOptions, job_config

    job_module.load_engine = NullEngine
    options = IndexOptions(inputs=(args.corpus,), output=args.output, device="cpu", workers=args.workers,
                           max_batch_tokens=16384, quiet=True)
    config = job_config(options)
    before_self, before_children = (resource.getrusage(resource.RUSAGE_SELF),
                                    resource.getrusage(resource.RUSAGE_CHILDREN))
    start = time.perf_counter()
    result = job_module.run_job(config)
    wall = time.perf_counter() - start
    after_self, after_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = lambda a, b: (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)
    m = result.metrics
    host = m.get("host_cpu_s", {})  # the job's own breakdown (absent before 2026-12-01)
    print(json.dumps({"version": args.version, "workers": args.workers, "rows": m["rows"], "tokens": m["tokens"],
                      "job_s": m["seconds"], "feeding_thread_us_per_row": 1e6 * host["main_thread"] / m["rows"]
                      if host else None, "writer_thread_us_per_row": 1e6 * host["writer_thread"] / m["rows"]
                      if host else None, "index_build_s": m.get("index_build_s"),
                      "wall_s": wall, "main_cpu_s": cpu(before_self, after_self),
                      "workers_cpu_s": cpu(before_children, after_children),
                      "main_us_per_row": 1e6 * cpu(before_self, after_self) / m["rows"],
                      "worker_us_per_token": 1e6 * cpu(before_children, after_children) / m["tokens"]
                      if args.workers else None,
                      "rows_per_s": m["rows"] / m["seconds"], "tokens_per_s": m["tokens"] / m["seconds"]}))


def run_child(corpus: Path, output: Path, workers: int, py_spy: Path | None, version: str) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, __file__, "--child", "--corpus", str(corpus), "--output", str(output),
               "--workers", str(workers), "--version", version]
    if py_spy is not None:  # the main process only: its workers are what it feeds on
        command = ["py-spy", "record", "--nonblocking", "-r", "200", "-f", "speedscope", "-o", str(py_spy), "--",
                   *command]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"host pipeline run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])  # py-spy talks too


def table(runs: list[dict]) -> str:
    lines = ["| code | workers | rows | main process CPU µs/row [min-max] | feeding thread µs/row "
             "| writer thread µs/row | worker CPU µs/token | rows/s (job) | tokens/s (job) | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    cell = lambda value, fmt="{:.2f}": "-" if value is None else fmt.format(value)
    for r in runs:
        lines.append(f"| {r['version']} | {r['workers']} | {r['rows']:,} | {r['main_us_per_row']:.2f} "
                     f"[{r['main_us_per_row_min']:.2f}-{r['main_us_per_row_max']:.2f}] | "
                     f"{cell(r['feeding_thread_us_per_row'])} | {cell(r['writer_thread_us_per_row'])} | "
                     f"{cell(r['worker_us_per_token'])} | {r['rows_per_s']:,.0f} | {r['tokens_per_s']:,.0f} | "
                     f"{r['wall_s']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=3, help="runs per worker count, alternated")
    parser.add_argument("--quick", action="store_true", help="2,000 rows, one run per worker count (CI)")
    parser.add_argument("--py-spy", action="store_true", help="also profile the main process of one run each")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--version", default="this checkout", help="a label for the code measured (its runs' rows)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.workers = args.workers[0]
        return child(args)
    from embedpipe.kernels.models.model_folder import builtin_models

    rows, repeats = (2000, 1) if args.quick else (args.rows, args.repeats)
    work = Path(tempfile.mkdtemp(prefix="host-pipeline-"))
    try:
        corpus = random_corpus(work / "corpus.parquet", rows, builtin_models()["minilm"])
        runs = []
        for round_index in range(repeats):  # worker counts alternate within each round
            for workers in args.workers:
                spy = args.out / f"py-spy-main-{workers}w.json" if args.py_spy and round_index == 0 else None
                if spy is not None:
                    args.out.mkdir(parents=True, exist_ok=True)
                runs.append(run_child(corpus, work / "out", workers, spy, args.version))
                print(json.dumps(runs[-1]), flush=True)
        summary = summarise(runs)
        print(table(summary), end="")
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "host_pipeline.json").write_text(json.dumps({"rows": rows, "cpus": os.cpu_count(),
                                                                     "runs": runs, "median": summary}, indent=2))
            (args.out / "host_pipeline.md").write_text(table(summary))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarise(runs: list[dict]) -> list[dict]:
    """Per worker count: the median of each figure over its runs, with min and max of the main µs/row."""
    summary = []
    for workers in sorted({r["workers"] for r in runs}):
        mine = [r for r in runs if r["workers"] == workers]
        median = {key: float(np.median([r[key] for r in mine])) if mine[0][key] is not None else None
                  for key in mine[0] if key not in ("workers", "version")}
        median.update(workers=workers, version=mine[0]["version"], rows=mine[0]["rows"], runs=len(mine),
                      main_us_per_row_min=min(r["main_us_per_row"] for r in mine),
                      main_us_per_row_max=max(r["main_us_per_row"] for r in mine))
        summary.append(median)
    return summary


if __name__ == "__main__":
    main()
