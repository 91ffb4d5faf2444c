"""PNG plots of a results.json (format 2): bars at the rounds' medians, whiskers at their range (log scales)."""
from __future__ import annotations

from pathlib import Path


def plots(results: dict, folder: Path) -> None:
    """latency.png (suites 1-2), http.png (3-4), indexing.png (5): each drawn when its suites ran."""
    import matplotlib.pyplot as plt
    models = results["models"]
    title = f"{results['environment'].get('gpu') or 'CPU'}, {results['environment']['date']}"
    latency, scoring = latency_groups(models, "latency"), latency_groups(models, "scoring")
    throughput = {f"{m}\n{t} tok": {k: row[k]["embeddings_per_s"] for k in ("ours", "peer")}
                  for m, r in models.items() for t, row in (r.get("http") or {}).get("throughput", {}).items()}
    concurrency = {f"{m} {kind}": entry["levels"] for m, r in models.items()
                   for kind, entry in (r.get("http") or {}).get("concurrency", {}).items()}
    indexing = {m: {k: v["embeddings_per_s"] for k, v in r["indexing"]["systems"].items()}
                for m, r in models.items() if r.get("indexing")}
    if latency or scoring:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        grouped_bars(axes[0], latency, "p50 ms (log)", "1. batch-1 latency")
        grouped_bars(axes[1], scoring, "p50 ms (log)", "2. scoring latency")
        save(fig, title, folder / "latency.png")
    if throughput or concurrency:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        grouped_bars(axes[0], throughput, "embeddings/s (log)", "3. throughput over HTTP")
        for label, levels in concurrency.items():
            for server, style in (("ours", "-o"), ("peer", "--x")):
                axes[1].plot([int(c) for c in levels], [levels[c][server]["p50"]["median"] for c in levels], style,
                             label=f"{label} {server}")
        axes[1].set(xscale="log", yscale="log", xlabel="concurrent clients", ylabel="p50 ms (log)",
                    title="4. concurrency, one text per request")
        axes[1].legend(fontsize=6)
        save(fig, title, folder / "http.png")
    if indexing:
        fig, ax = plt.subplots(figsize=(13, 4.5))
        grouped_bars(ax, indexing, "embeddings/s, own clock (log)", "5. offline indexing")
        save(fig, title, folder / "indexing.png")


def latency_groups(models: dict, group: str) -> dict:
    """{"model\\nNxT": {variant: p50 summary}} of suite 1 (group "latency") or 2 ("scoring")."""
    groups = {}
    for model, r in models.items():
        suite = r.get("latency") or {}
        for size, row in suite.get(group, {}).items():
            case = f"1x{size}" if group == "latency" else f"{size}x{suite['scoring_tokens']}"
            groups[f"{model}\n{case}"] = {k: v["p50"] for k, v in row.items() if k != "vs"}
    return groups


def save(fig, title: str, path: Path) -> None:
    import matplotlib.pyplot as plt
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def grouped_bars(ax, groups: dict[str, dict[str, dict]], ylabel: str, title: str) -> None:
    """One group of bars per key, one colour per series; each value a {median, min, max} summary."""
    ax.set(ylabel=ylabel, title=title)
    if not groups:
        return
    series = list(dict.fromkeys(k for g in groups.values() for k in g))
    width = 0.8 / max(len(series), 1)
    for i, name in enumerate(series):
        points = [(j + i * width, g[name]) for j, g in enumerate(groups.values()) if name in g]
        medians = [v["median"] for _, v in points]
        errors = [[m - v["min"] for m, (_, v) in zip(medians, points)],
                  [v["max"] - m for m, (_, v) in zip(medians, points)]]
        ax.bar([x for x, _ in points], medians, width, yerr=errors, capsize=2, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], list(groups), fontsize=7)
    ax.set_yscale("log")
    ax.legend(fontsize=7)
