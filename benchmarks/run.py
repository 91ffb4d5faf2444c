"""Every benchmark suite, ours against transformers and sentence-transformers, each system in a fresh process.

    python benchmarks/run.py                 # on the GPU: every suite and model (sizes.py: ~42 min, --budget-s 510)
    python benchmarks/run.py --suites latency,http --out DIR   # the same in 10-minute device calls: this, then
    python benchmarks/run.py --suites indexing --models M --out DIR --merge  # for MiniLM and BERT-base, and
    python benchmarks/run.py --suites indexing --models M --out DIR --merge --rounds 2 --budget-s 570  # a 0.6B
                                             # shape (~9 min: past the default budget), then its third round,
    python benchmarks/run.py --suites indexing --models M --out DIR --merge --add-rounds --rounds 1  # a warm call
                                             # to the same machine (sizes.py says why)
    python benchmarks/run.py --sizes one-call   # every suite and model in one call: shorter windows, 20k rows
    python benchmarks/run.py --quick         # CPU smoke run of every suite on the default model (CI)

Suites (each module's docstring says how it measures):
  latency   1. batch 1, 128 / 512 / 4096 tokens   2. batches of 5 / 25 / 50 x 512 tokens  (suite_latency.py)
  http      3. requests of 512 / 1024 / 4096-token sequences from 4 client processes
            4. 1 / 2 / 4 / 8 / 16 concurrent clients, one 512-token passage or one short query each (suite_http.py)
  indexing  5. `embedpipe index` against the script a user would write (st_index.py), Parquet to FAISS
                                                                                              (suite_indexing.py)

On the GPU each model first gets `embedpipe warmup`, as a user runs it once per machine: ours then runs the
attention backend it measured fastest per batch size (recorded as the model's "attention"). Every timed system
runs in its own fresh process on inputs from a file (isolation.py); before each timed series
the GPU is warmed and its clocks recorded; ours and each peer alternate over `rounds` rounds and every figure is
the median of the rounds with their range; ratios are taken round by round within this run. Models:
all-MiniLM-L6-v2 (real weights) and random-weight BERT-base, Qwen3-0.6B (causal, last token) and pplx-embed-0.6B
(bidirectional, mean) shapes. results.json (environment, ceilings, clocks, rounds, spreads) and results.md are
rewritten after every suite, so a run cut short keeps what it measured; --budget-s skips (and records) the work
that would no longer fit. `python benchmarks/report.py --readme` makes the README's tables from the newest run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

import report  # noqa: E402
from common import MODELS, ceilings, environment, gpu_clocks, linear_params, model_folder  # noqa: E402
from isolation import Deadline, OutOfBudget  # noqa: E402
from sizes import PRESETS, Sizes  # noqa: E402
from suite_http import HttpRun  # noqa: E402
from suite_indexing import IndexingRun  # noqa: E402
from suite_latency import LatencyRun  # noqa: E402

SUITES = {"latency": LatencyRun, "http": HttpRun, "indexing": IndexingRun}
FULL_RUN_BUDGET_S = 510  # one 10-minute device call, less ~60 s of set-up and a margin to write and stop
MIN_SUITE_S = 15  # a suite does not start with less of the budget left


@dataclass
class ModelRun:
    """What a suite needs of one model's run (`info`: linear_params, flops_per_token, max_tokens, weight_bytes,
    pooling)."""
    name: str
    folder: Path
    device: str
    sizes: Sizes
    sizes_dict: dict
    ceiling: dict
    info: dict
    work: Path
    deadline: Deadline
    earlier: dict | None = None  # --add-rounds: the model's suite 5 as an earlier call left it in --out


def gpu_slug() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "")
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-").split("-")[0]


def model_info(folder: Path, device: str) -> dict:
    from embedpipe.kernels.models.model_folder import read_model_folder
    spec, params = read_model_folder(str(folder)), linear_params(folder)
    return {"linear_params": params, "flops_per_token": 2 * params, "max_tokens": spec.max_seq_length,
            "weight_bytes": params * (2 if device.startswith("cuda") else 4), "pooling": spec.pooling}


def measure_attention(folder: Path, cache: Path) -> dict:
    """On CUDA, what a user runs once per machine before a job: `embedpipe warmup`, which times the attention
    backends on the model's shape and stores the fastest per batch size in `cache` (EMBEDPIPE_CACHE_DIR, set for
    every process of the run), so ours runs that measured choice. -> {"attention": what auto runs and why,
    "attention_timings_ms": {"<tokens> <backend>": ms}}; the warmup's last lines in "attention_error" if it failed."""
    done = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "warmup", "--model", str(folder)],
                          env={**os.environ, "EMBEDPIPE_CACHE_DIR": str(cache)}, capture_output=True, text=True)
    if done.returncode:
        return {"attention_error": done.stderr[-2000:]}
    return warmup_attention(done.stderr)


def warmup_attention(printed: str) -> dict:
    """`embedpipe warmup`'s lines ("attention_128_tokens_triton_ms: 0.023", "attention: triton (measured ...)")
    -> measure_attention's record."""
    record: dict = {"attention_timings_ms": {}}
    for line in printed.splitlines():
        name, _, value = line.strip().partition(": ")
        if name == "attention":
            record["attention"] = value
        elif match := re.fullmatch(r"attention_(\d+)_tokens_(.+)_ms", name):
            record["attention_timings_ms"][f"{match[1]} {match[2]}"] = float(value)
    return record


def attempt(result: dict, suite: str, fn):
    """fn(); a suite that fails or no longer fits the budget is recorded, and the others still run."""
    try:
        return fn()
    except OutOfBudget as cut:
        result.setdefault("skipped", {})[suite] = str(cut)
        print(f"{suite}: {cut}", flush=True)
    except (Exception, SystemExit) as error:
        result.setdefault("errors", {})[suite] = "".join(traceback.format_exception(error))[-4000:]
        print(f"{suite} FAILED\n{result['errors'][suite]}", flush=True)
    return None


def start_suites(ctx: ModelRun, suites: list[str], result: dict) -> dict:
    """Every suite's processes started at once (the latency workers, both servers), then waited for: {suite: run}
    of those ready. Nothing is timed while they load."""
    def start(suite):
        ctx.deadline.check(MIN_SUITE_S, "the suite")
        return SUITES[suite](ctx)

    def ready(run):
        run.ready()
        return run

    runs = {suite: run for suite in suites if (run := attempt(result, suite, lambda: start(suite))) is not None}
    started = {}
    for suite, run in runs.items():
        if attempt(result, suite, lambda: ready(run)) is None:
            run.stop()
        else:
            started[suite] = run
    return started


def bench_model(ctx: ModelRun, suites: list[str], after_suite) -> dict:
    """The model's suites, in turn, once all have started; `after_suite(result)` runs after each, so a run cut
    short keeps what it measured."""
    result = {**ctx.info, "seconds": {}}
    start = time.perf_counter()
    if ctx.device.startswith("cuda"):
        result |= measure_attention(ctx.folder, Path(os.environ["EMBEDPIPE_CACHE_DIR"]))
        result["seconds"]["warmup"] = time.perf_counter() - start
        print(f"{ctx.name}: attention {result.get('attention') or result.get('attention_error')}", flush=True)
        start = time.perf_counter()
    runs = start_suites(ctx, suites, result)
    result["seconds"]["start"] = time.perf_counter() - start
    print(f"{ctx.name}: started in {result['seconds']['start']:.0f} s", flush=True)
    for suite, run in runs.items():
        start = time.perf_counter()
        print(f"{ctx.name}: {suite}", flush=True)
        measured = attempt(result, suite, lambda: (ctx.deadline.check(MIN_SUITE_S, "the suite"),
                                                   run.measure())[1])
        attempt(result, suite, run.stop)
        if measured is not None:
            result[suite] = measured
        result["seconds"][suite] = time.perf_counter() - start
        print(f"{ctx.name}: {suite} took {result['seconds'][suite]:.0f} s", flush=True)
        after_suite(result)
        if ctx.device.startswith("cuda"):
            torch.cuda.empty_cache()
    after_suite(result)
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: the default model, small sizes, 2 rounds")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated (default: {','.join(MODELS)}; --quick: minilm)")
    parser.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated of {', '.join(SUITES)}")
    parser.add_argument("--sizes", choices=sorted(PRESETS), default=None,
                        help="sizes.py's preset (default: full; --quick: quick)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every suite (default: sizes.py's, 3)")
    parser.add_argument("--corpus-rows", type=int, default=None, help="suite 5's rows for every model")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"skip (and record) work that would end later (default: {FULL_RUN_BUDGET_S} on the GPU, "
                             "none with --quick; 0: none)")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/DATE-GPU")
    parser.add_argument("--merge", action="store_true", help="add to an existing results.json in --out")
    parser.add_argument("--add-rounds", action="store_true",
                        help="with --merge: suite 5's rounds are added to those an earlier call made on this machine "
                             "(the same boot of it) on the same corpus, instead of replacing them")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "embedpipe-bench-models")
    return parser.parse_args()


def run_sizes(args) -> tuple[str, Sizes]:
    preset = args.sizes or ("quick" if args.quick else "full")
    sizes = PRESETS[preset]
    if args.rounds:
        sizes = replace(sizes, rounds=args.rounds)
    if args.corpus_rows:
        sizes = replace(sizes, corpus_rows=args.corpus_rows, large_model_rows=args.corpus_rows)
    return preset, sizes


def new_results(args, device: str, preset: str, sizes: Sizes, budget: float | None) -> dict:
    """The run's record before any suite: environment, sizes, clocks, ceilings (measured now)."""
    results = {"format": report.FORMAT, "environment": environment(), "pid": os.getpid(), "device": device,
               "preset": preset, "sizes": asdict(sizes), "quick": args.quick, "budget_s": budget,
               "clocks_start": gpu_clocks(), "ceilings": ceilings(device), "models": {},
               "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]])}
    if device == "cuda":
        torch.cuda.empty_cache()
    print(json.dumps({k: results[k] for k in ("environment", "ceilings", "clocks_start")}), flush=True)
    return results


def main() -> None:
    args = parse_args()
    device = "cpu" if args.quick or not torch.cuda.is_available() else "cuda"
    (preset, sizes), start = run_sizes(args), time.perf_counter()
    budget = args.budget_s if args.budget_s is not None else (None if args.quick else FULL_RUN_BUDGET_S)
    models = (args.models or ("minilm" if args.quick else ",".join(MODELS))).split(",")
    suites = [s for s in args.suites.split(",") if s]
    if unknown := set(suites) - set(SUITES):
        raise SystemExit(f"unknown suites {sorted(unknown)}: choose from {', '.join(SUITES)}")
    out = args.out or Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-{gpu_slug()}"
    previous = json.loads((out / "results.json").read_text()) if args.merge and (out / "results.json").exists() else {}
    if args.add_rounds and not args.merge:
        raise SystemExit("--add-rounds adds to the rounds in --out's results.json: give --merge too")
    results, deadline = new_results(args, device, preset, sizes, budget), Deadline(budget)
    with torch.device(device):  # random weights drawn on the GPU: seconds
        folders = {name: model_folder(name, args.cache) for name in models}
    with tempfile.TemporaryDirectory() as work:
        # the attention choice each model's warmup measures (bench_model), read by every process the run starts
        os.environ["EMBEDPIPE_CACHE_DIR"] = str(Path(work) / "embedpipe-cache")
        for name in models:
            def after_suite(entry, name=name):
                results["models"][name] = entry
                this_run = {"command": results["command"], "models": list(results["models"]), "suites": suites,
                            "preset": preset, "seconds": time.perf_counter() - start,
                            "ceilings": results["ceilings"], "environment": results["environment"]}
                report.write(report.merge(previous, {**results, "runs": [this_run]}), out)
            earlier = previous.get("models", {}).get(name, {}).get("indexing") if args.add_rounds else None
            ctx = ModelRun(name, folders[name], device, sizes, asdict(sizes), results["ceilings"],
                           model_info(folders[name], device), Path(work), deadline, earlier)
            bench_model(ctx, suites, after_suite)
    print((out / "results.md").read_text())
    failed = {f"{m}/{s}" for m, r in results["models"].items() for s in r.get("errors", {})}
    print(f"total {time.perf_counter() - start:.0f} s; results in {out}")
    if failed:
        raise SystemExit(f"failed suites: {', '.join(sorted(failed))} (errors in results.json)")


if __name__ == "__main__":
    main()
