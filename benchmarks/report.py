"""results.json -> results.md (tables) and PNG plots; and the README's benchmark block.

    python benchmarks/report.py benchmarks/results/DATE-GPU               # redraw from its results.json
    python benchmarks/report.py benchmarks/results/DATE-GPU other.json    # add another run's models, redraw
    python benchmarks/report.py --readme [benchmarks/results/DATE-GPU]    # README block from that run (default: the
                                                                          # newest folder with a full-run results.json)
    python benchmarks/report.py --readme --check                          # exit 1 if the README's block is stale
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from report_tables import (RUNS_ORDER, concurrency_rows, indexing_rows, latency_rows, run_dates, skipped_notes,
                           table, throughput_rows, where_we_lose)

FORMAT = 2  # every system in its own process, rounds and spreads (run.py since issue 24)
REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
README = REPO / "README.md"
BEGIN, END = "<!-- benchmarks:begin", "<!-- benchmarks:end -->"


def merge(base: dict, other: dict) -> dict:
    """`other`'s suites over `base`'s, model by model (a model's suites from both runs are kept), both runs
    listed (each with its own ceilings); the rest is `base`'s (`other`'s where `base` is empty)."""
    models = dict(base.get("models", {}))
    for name, entry in other["models"].items():
        old = models.get(name, {})
        models[name] = {**old, **entry, "seconds": {**old.get("seconds", {}), **entry.get("seconds", {})}}
        for key in ("errors", "skipped"):  # an error or a skip stays only for a suite that `other` did not run again
            kept = {suite: why for suite, why in old.get(key, {}).items() if suite not in entry.get("seconds", {})}
            if kept := {**kept, **entry.get(key, {})}:
                models[name][key] = kept
            else:
                models[name].pop(key, None)
    return {**other, **base, "models": models, "runs": base.get("runs", []) + other.get("runs", [])}


def write(results: dict, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results, indent=2))
    (folder / "results.md").write_text(markdown(results))
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    from report_plots import plots
    plots(results, folder)


def clock_range(results: dict) -> str:
    """The SM clocks nvidia-smi read after the warm-ups, over the whole run."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "sm_mhz" in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(results.get("models", {}))
    if not found:
        return "GPU clocks: not read (no GPU)."
    sm = [c["sm_mhz"] for c in found]
    return (f"SM clocks after each warm-up: {min(sm)}-{max(sm)} MHz over {len(sm)} readings "
            f"(max {found[0]['max_sm_mhz']} MHz; at the start {results.get('clocks_start', {}).get('sm_mhz', '-')}).")


def header(results: dict) -> list[str]:
    env, ceiling, sizes = results["environment"], results["ceilings"], results["sizes"]
    return [f"torch {env['torch']}, FlashInfer {env['flashinfer']}, transformers {env['transformers']}, "
            f"sentence-transformers {env['sentence_transformers']}, Python {env['python']}, {env['cpus']} CPUs; "
            f"ceilings in the same run: {ceiling['matmul_tflops']:.0f} TFLOP/s dense {ceiling['matmul_dtype']} "
            f"matmul, {ceiling['copy_tbps']:.2f} TB/s copy. {clock_range(results)}", "",
            f"Every system in its own fresh process; {sizes['rounds']} rounds, ours and the peers alternating; a "
            "figure is the median of the rounds [min-max], a ratio (how many times better ours is) is taken round "
            f"by round. Runs, {RUNS_ORDER}:", "",
            *[f"- `{r['command']}`: {', '.join(r['models'])}, {r['seconds']:.0f} s" for r in results.get("runs", [])],
            "", *attention_lines(results["models"])]


def attention_lines(models: dict) -> list[str]:
    """The attention backend ours ran per model: what `embedpipe warmup` measured at the run's start (runs before
    2026-12-04 made no warmup: ours ran torch-varlen, FlashInfer not carried)."""
    measured = [f"{name}: {entry['attention']}" if entry.get("attention") else
                f"{name}: the warmup failed (results.json has its error), so the safe default ran"
                for name, entry in models.items() if entry.get("attention") or entry.get("attention_error")]
    return ["Attention after `embedpipe warmup`: " + "; ".join(measured) + ".", ""] if measured else []


def markdown(results: dict) -> str:
    if results.get("format", 1) < FORMAT:
        raise SystemExit("these results are of the old format (peers in our process): their results.md stands")
    env, models = results["environment"], results["models"]
    lines = [f"# embedpipe benchmarks, {run_dates(results)}, {env.get('gpu') or 'CPU'} ({results['device']})", "",
             *header(results),
             "## 1. Low-latency embedding (batch 1, pre-tokenised, ms)", "",
             "weights/bandwidth: the time to read the weights once at the measured copy bandwidth, over p50.", "",
             *table(["model", "case", "variant", "p50", "p90", "p99", "max", "n", "weights/bandwidth",
                     "vs transformers", "vs sentence-transformers"], latency_rows(models, "latency", True)),
             "## 2. Low-latency scoring (batches of N sequences, pre-tokenised, ms)", "",
             *table(["model", "case", "variant", "p50", "p90", "p99", "max", "n", "MFU", "vs transformers",
                     "vs sentence-transformers"], latency_rows(models, "scoring", True)),
             "## 3. High throughput over HTTP (pre-tokenised requests, 4 client processes)", "",
             *table(["model", "sequences x tokens", "server", "embeddings/s", "tokens/s", "MFU", "request p50 ms",
                     "vs peer"], throughput_rows(models)),
             "## 4. Concurrency over HTTP (closed-loop clients, one text each, tokenised in the server, ms)", "",
             *table(["model", "requests", "clients", "server", "p50", "p90", "p99", "max", "n", "requests/s",
                     "mean batch", "vs peer p50", "vs peer requests/s"], concurrency_rows(models, True)),
             *indexing_section(models), *agreement_section(models),
             "## Where we lose", "", *where_we_lose(models), ""]
    if notes := skipped_notes(models, results["sizes"]["rounds"]):
        lines += ["## Not measured", "", *notes, ""]
    return "\n".join(lines) + "\n"


def indexing_section(models: dict) -> list[str]:
    return ["## 5. Offline indexing (Parquet in, Parquet + FAISS out)", "",
            "own clock: `embedpipe index`'s job clock (read, tokenise, embed, write, index); the script's `encode` "
            "alone. with start-up: rows over the process's wall time, imports included. Ratios: ours over the row's.",
            "", *table(["model", "rows", "system", "embeddings/s, own clock", "embeddings/s, with start-up", "wall s",
                        "GPU busy", "peak RSS MiB", "ours vs, own clocks", "ours vs, wall"], indexing_rows(models))]


def agreement_section(models: dict) -> list[str]:
    rows = []
    for model, r in models.items():
        for check, values in (("suites 1-2", (r.get("latency") or {}).get("agreement", {})),
                              ("HTTP servers", (r.get("http") or {}).get("agreement", {})),
                              ("index vs script", (r.get("indexing") or {}).get("agreement", {}))):
            rows += [[model, f"{check}: {peer}", f"{cosine:.6f}"] for peer, cosine in values.items() if peer != "rows"]
    return ["## Agreement: vectors the processes returned (min cosine)", "",
            *table(["model", "check", "min cosine"], rows)]


def newest_results(root: Path = RESULTS) -> Path | None:
    """The newest results folder (by its dated name) whose results.json is a GPU run of this format."""
    for folder in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        path = folder / "results.json"
        if path.exists():
            results = json.loads(path.read_text())
            if results.get("format", 1) >= FORMAT and not results.get("quick") and results.get("device") != "cpu":
                return folder
    return None


def readme_block(folder: Path | None) -> str:
    """The README's benchmark block, made from `folder`'s results.json (None: the placeholder)."""
    source = "none" if folder is None else (folder.resolve().relative_to(REPO).as_posix()
                                            if folder.resolve().is_relative_to(REPO) else str(folder.resolve()))
    lines = [f"{BEGIN} source={source} -->",
             "<!-- generated by `python benchmarks/report.py --readme`: edit benchmarks/report.py, not this -->", ""]
    if folder is None:
        lines += ["No run of the benchmarks in their current form (every system in a fresh process of its own, warm "
                  "clocks, rounds alternating ours and the peers) is committed yet, so this block has no figures. "
                  "The tables that stood here (`benchmarks/results/2026-11-29-h200/`: peers in our process, two "
                  "device calls, before the engine-thread fix) are superseded. After a run, `python "
                  "benchmarks/report.py --readme` writes the tables here from the newest results folder.", ""]
        return "\n".join(lines + [END])
    from readme_tables import summary_tables
    lines += summary_tables(json.loads((folder / "results.json").read_text()), source)
    return "\n".join(lines + [END])


def update_readme(block: str, readme: Path = README) -> bool:
    """Replaces the README's block with `block`; False if it was already that."""
    text = readme.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    if text[start:end] == block:
        return False
    readme.write_text(text[:start] + block + text[end:])
    return True


def readme_source(readme: Path = README) -> Path | None:
    """The results folder the README's block names (None: the placeholder)."""
    text = readme.read_text()
    line = text[text.index(BEGIN):].splitlines()[0]
    source = line.split("source=", 1)[1].split()[0]
    return None if source == "none" else REPO / source  # a path under the repo, or an absolute one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, nargs="?", help="a results folder (with --readme: default the newest)")
    parser.add_argument("others", type=Path, nargs="*", help="other runs' results.json to merge in")
    parser.add_argument("--readme", action="store_true", help="write the README's benchmark block")
    parser.add_argument("--check", action="store_true", help="with --readme: only check that the block is current")
    args = parser.parse_args()
    if args.readme:
        block = readme_block(args.folder or newest_results())
        if args.check:
            current = README.read_text()
            sys.exit(0 if block in current else f"the README's benchmark block is stale: run {sys.argv[0]} --readme")
        print(f"README block {'rewritten' if update_readme(block) else 'already current'} "
              f"({block.splitlines()[0]})")
        return
    results = json.loads((args.folder / "results.json").read_text())
    for other in args.others:
        results = merge(results, json.loads(other.read_text()))
    write(results, args.folder)
    print(f"wrote {args.folder / 'results.md'} and its plots")


if __name__ == "__main__":
    main()
