"""results.json -> results.md (tables) and PNG plots.

    python benchmarks/report.py benchmarks/results/DATE-GPU               # redraw from its results.json
    python benchmarks/report.py benchmarks/results/DATE-GPU other.json    # add another run's models, redraw
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

OURS = "ours"
PEERS = ("transformers", "sentence-transformers")


def merge(base: dict, other: dict) -> dict:
    """`other`'s suites over `base`'s, model by model (a model's suites from both runs are kept), both runs
    listed (each with its own ceilings); the rest is `base`'s (`other`'s where `base` is empty)."""
    models = dict(base.get("models", {}))
    for name, entry in other["models"].items():
        old = models.get(name, {})
        models[name] = {**old, **entry, "seconds": {**old.get("seconds", {}), **entry.get("seconds", {})}}
        # an error stays only for a suite that `other` did not run again
        errors = {suite: error for suite, error in old.get("errors", {}).items() if suite not in entry.get("seconds", {})}
        if errors := {**errors, **entry.get("errors", {})}:
            models[name]["errors"] = errors
        else:
            models[name].pop("errors", None)
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
    plots(results, folder)


def _ratio(ours: float, peer: float) -> str:
    return f"{ours / peer:.2f}x" if peer else "-"


def markdown(results: dict) -> str:
    env, ceiling = results["environment"], results["ceilings"]
    lines = [f"# embedpipe benchmarks, {env['date']}, {env.get('gpu') or 'CPU'} ({results['device']})", "",
             f"torch {env['torch']}, FlashInfer {env['flashinfer']}, transformers {env['transformers']}, "
             f"sentence-transformers {env['sentence_transformers']}, Python {env['python']}, {env['cpus']} CPUs. "
             f"Ceilings measured in the same run: {ceiling['matmul_tflops']:.0f} TFLOP/s dense {ceiling['matmul_dtype']} "
             f"matmul, {ceiling['copy_tbps']:.2f} TB/s copy (read + write).",
             "", "Runs (each measured its ceilings; MFU and bandwidth fractions use the first run's):", "",
             *[f"- `{r['command']}`: {', '.join(r['models'])}, {r['seconds']:.0f} s"
               + (f"; ceilings {r['ceilings']['matmul_tflops']:.0f} TFLOP/s, {r['ceilings']['copy_tbps']:.2f} TB/s"
                  if "ceilings" in r else "") + (f" ({r['note']})" if "note" in r else "")
               for r in results.get("runs", [])], ""]
    models = results["models"]
    lines += _latency_table(models) + _scoring_table(models) + _throughput_table(models)
    lines += _concurrency_table(models) + _indexing_table(models) + _agreement_table(models)
    errors = [f"- {model} / {suite}: `{text.strip().splitlines()[-1]}`" for model, r in models.items()
              for suite, text in r.get("errors", {}).items()]
    if errors:
        lines += ["## Failed suites (tracebacks in results.json)", "", *errors, ""]
    return "\n".join(lines) + "\n"


def _best_peer(row: dict) -> float:
    return min(row[p]["p50"] for p in PEERS if p in row)


def _suite_table(intro: list[str], columns: list[str], models: dict, suite: str, cells) -> list[str]:
    """A table of one suite: a row per model, size and variant (`cells(result, size, row, variant, s)` gives the
    cells after the model's); a size the model skipped gets one row saying why."""
    lines = [*intro, "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for model, r in models.items():
        for size, row in r.get(suite, {}).items():
            if "skipped" in row:
                lines.append(f"| {model} | {size} | - | {row['skipped']} |" + " |" * (len(columns) - 4))
                continue
            for variant, s in row.items():
                lines.append("| " + " | ".join([model, *cells(r, size, row, variant, s)]) + " |")
    return lines + [""]


def _latency_table(models: dict) -> list[str]:
    return _suite_table(
        ["## 1. Low-latency embedding (batch 1, pre-tokenised, ms)", "",
         "weights/bandwidth: the time to read the weights once at the measured copy bandwidth, over p50.", ""],
        ["model", "tokens", "variant", "p50", "p90", "p99", "max", "p50 vs faster peer", "weights/bandwidth"],
        models, "latency",
        lambda r, tokens, row, variant, s: [tokens, variant, f"{s['p50']:.3f}", f"{s['p90']:.3f}", f"{s['p99']:.3f}",
                                            f"{s['max']:.3f}", _ratio(_best_peer(row), s["p50"]),
                                            f"{s['weight_bandwidth_fraction']:.1%}"])


def _scoring_table(models: dict) -> list[str]:
    return _suite_table(
        ["## 2. Low-latency scoring (batches of N sequences, pre-tokenised, ms)", ""],
        ["model", "sequences x tokens", "variant", "p50", "p90", "p99", "max", "p50 vs faster peer", "MFU"],
        models, "scoring",
        lambda r, seqs, row, variant, s: [f"{seqs} x {r['scoring_tokens']}", variant, f"{s['p50']:.2f}",
                                          f"{s['p90']:.2f}", f"{s['p99']:.2f}", f"{s['max']:.2f}",
                                          _ratio(_best_peer(row), s["p50"]), f"{s['mfu']:.1%}"])


def _throughput_table(models: dict) -> list[str]:
    return _suite_table(
        ["## 3. High throughput over HTTP (requests of 100 pre-tokenised sequences, 4 client processes)", ""],
        ["model", "tokens", "server", "embeddings/s", "tokens/s", "vs peer", "MFU", "request p50 ms"],
        models, "throughput",
        lambda r, tokens, row, server, s: [tokens, server, f"{s['embeddings_per_s']:,.0f}", f"{s['tokens_per_s']:,.0f}",
                                           _ratio(s["embeddings_per_s"], row["peer"]["embeddings_per_s"]),
                                           f"{s['mfu']:.1%}", f"{s['request_p50']:.1f}"])


def _concurrency_table(models: dict) -> list[str]:
    workers = sorted({r.get("http_workers", 1) for r in models.values() if r.get("concurrency")})
    return _suite_table(
        ["## 4. Concurrency over HTTP (closed-loop clients, one text each, tokenised in the server, ms)", "",
         f"ours: `embedpipe serve --http-workers {'/'.join(map(str, workers))}` (HTTP processes in front of the "
         "engine process); the peer answers one request at a time.", ""],
        ["model", "clients", "server", "p50", "p90", "p99", "max", "requests/s", "vs peer", "mean batch"],
        models, "concurrency",
        lambda r, clients, row, server, s: [
            clients, server, f"{s['p50']:.2f}", f"{s['p90']:.2f}", f"{s['p99']:.2f}", f"{s['max']:.2f}",
            f"{s['requests_per_s']:,.1f}", _ratio(s["requests_per_s"], row["peer"]["requests_per_s"]),
            f"{s['mean_batch_sequences']:.1f}" if "mean_batch_sequences" in s else "-"])


def _indexing_table(models: dict) -> list[str]:
    lines = ["## 5. Offline indexing (Parquet in, Parquet + FAISS out)", "",
             "`embedpipe index`: the job's own clock (read, tokenise, embed, write); engine rows: pre-tokenised, "
             "no I/O; peers: the first rows of the same corpus.", "",
             "| model | corpus | run | embeddings/s | tokens/s | vs sentence-transformers | GPU busy | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for model, r in models.items():
        if "indexing" not in r:
            continue
        x = r["indexing"]
        corpus = f"{x['corpus']['rows']:,} rows, median {x['corpus']['median_tokens']:.0f} tokens"
        st = x["peers"]["sentence-transformers"]["embeddings_per_s"]
        busy = x["index"].get("gpu_busy_while_embedding")
        rows = [("embedpipe index", x["index"], f"{busy:.0%}" if busy is not None else "-",
                 f"{x['index']['peak_rss_mib']:,.0f}")]
        rows += [(f"engine: {name}", v, "", "") for name, v in x["engine"].items()]
        rows += [(name, v, "", "") for name, v in x["peers"].items()]
        for label, v, busy_cell, rss in rows:
            lines.append(f"| {model} | {corpus} | {label} | {v['embeddings_per_s']:,.0f} | {v['tokens_per_s']:,.0f} | "
                         f"{_ratio(v['embeddings_per_s'], st)} | {busy_cell} | {rss} |")
    return lines + [""]


def _agreement_table(models: dict) -> list[str]:
    lines = ["## Agreement checked before timing (min cosine)", "", "| model | check | min cosine |", "|---|---|---|"]
    for model, r in models.items():
        for check, values in (("in process", r.get("agreement", {})), ("HTTP servers", r.get("http_agreement", {})),
                              ("index vs peers", r.get("indexing", {}).get("agreement", {}))):
            for peer, cosine in values.items():
                lines.append(f"| {model} | {check}: {peer} | {cosine:.6f} |")
    return lines + [""]


def plots(results: dict, folder: Path) -> None:
    """latency.png (suites 1-2), http.png (3-4), indexing.png (5): each drawn when its suites ran."""
    import matplotlib.pyplot as plt
    models = results["models"]
    title = f"{results['environment'].get('gpu') or 'CPU'}, {results['environment']['date']}"
    latency = {f"{m}\n{t} tok": {k: v["p50"] for k, v in row.items()}
               for m, r in models.items() for t, row in r.get("latency", {}).items() if "skipped" not in row}
    scoring = {f"{m}\n{s}x{r['scoring_tokens']}": {k: v["p50"] for k, v in row.items()}
               for m, r in models.items() for s, row in r.get("scoring", {}).items()}
    throughput = {f"{m}\n{t} tok": {k: v["embeddings_per_s"] for k, v in row.items()}
                  for m, r in models.items() for t, row in r.get("throughput", {}).items() if "skipped" not in row}
    concurrency = {m: r["concurrency"] for m, r in models.items() if r.get("concurrency")}
    indexing = {m: {"embedpipe index": r["indexing"]["index"]["tokens_per_s"],
                    **{k: v["tokens_per_s"] for k, v in {**r["indexing"]["engine"], **r["indexing"]["peers"]}.items()}}
                for m, r in models.items() if "indexing" in r}

    if latency or scoring:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        _grouped_bars(axes[0], latency, "p50 ms (log)", "1. batch-1 latency")
        _grouped_bars(axes[1], scoring, "p50 ms (log)", "2. scoring latency")
        _save(fig, title, folder / "latency.png")
    if throughput or concurrency:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        _grouped_bars(axes[0], throughput, "embeddings/s (log)", "3. throughput, 100-sequence requests")
        for model, levels in concurrency.items():
            for server, style in (("ours", "-o"), ("peer", "--x")):
                axes[1].plot([int(c) for c in levels], [levels[c][server]["p50"] for c in levels], style,
                             label=f"{model} {server}")
        axes[1].set(xscale="log", yscale="log", xlabel="concurrent clients", ylabel="p50 ms (log)",
                    title="4. concurrency, one text per request")
        axes[1].legend(fontsize=7)
        _save(fig, title, folder / "http.png")
    if indexing:
        fig, ax = plt.subplots(figsize=(13, 4.5))
        _grouped_bars(ax, indexing, "tokens/s (log)", "5. offline indexing")
        _save(fig, title, folder / "indexing.png")


def _save(fig, title: str, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _grouped_bars(ax, groups: dict[str, dict[str, float]], ylabel: str, title: str) -> None:
    """One group of bars per key (log scale), one colour per series (variant or server)."""
    ax.set(ylabel=ylabel, title=title)
    if not groups:
        return
    series = list(dict.fromkeys(k for g in groups.values() for k in g))
    width = 0.8 / max(len(series), 1)
    for i, name in enumerate(series):
        xs = [j + i * width for j, g in enumerate(groups.values()) if name in g]
        ys = [g[name] for g in groups.values() if name in g]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], list(groups), fontsize=7)
    ax.set_yscale("log")
    ax.legend(fontsize=7)


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    results = json.loads((folder / "results.json").read_text())
    for other in sys.argv[2:]:
        results = merge(results, json.loads(Path(other).read_text()))
    write(results, folder)
    print(f"wrote {folder / 'results.md'} and its plots")
