"""Markdown tables from the A/B results files (latency_ab.py, serve_online_ab.py, linear_act_bench.py,
split_k_bench.py).

    python benchmarks/ab_report.py RESULTS_DIR > RESULTS_DIR/tables.md

Every latency-ab.json, serve-online-ab.json, linear-act.json and split-k*.json under RESULTS_DIR becomes one table,
titled by its folder; nothing is typed by hand.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def latency_table(data: dict) -> list[str]:
    systems = list(data["rounds"])
    lines = ["| model, batch | " + " | ".join(f"{s} p50 ms (min-max of rounds)" for s in systems)
             + " | after / before |",
             "|---|" + "---|" * (len(systems) + 1)]
    for key, by_system in data["summary"].items():
        cells = [f"{v['median_ms']:.3f} ({v['min_ms']:.3f}-{v['max_ms']:.3f})" for v in by_system.values()]
        ratio = by_system[systems[-1]]["median_ms"] / by_system[systems[0]]["median_ms"] if len(systems) > 1 else 1.0
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    lines += throughput_lines(data.get("throughput", {}))
    return lines + [f"\n{len(next(iter(data['rounds'].values())))} rounds, alternating, each a fresh process."]


def throughput_lines(throughput: dict) -> list[str]:
    """The batch rows of latency_ab.py --throughput: M tokens/s and MFU (of the run's median matmul rate)."""
    if not throughput:
        return []
    systems = list(next(iter(throughput.values())))
    lines = ["", "| model, batch (two in flight) | " + " | ".join(f"{s} M tokens/s (min-max) | {s} MFU"
                                                                  for s in systems)
             + " |", "|---|" + "---|---|" * len(systems)]
    for key, by_system in throughput.items():
        cells = [f"{v['m_tokens_per_s']:.3f} ({v['min']:.3f}-{v['max']:.3f}) | {v['mfu']:.1%}"
                 for v in by_system.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    ceiling = next(iter(next(iter(throughput.values())).values()))["ceiling_tflops"]
    return lines + ["", f"MFU: dense FLOPs per token x tokens/s over {ceiling:.0f} TFLOP/s, the median bf16 "
                        "matmul rate the run's processes measured."]


def serve_table(data: dict) -> list[str]:
    systems = list(data["rounds"])
    lines = ["| workload, clients | " + " | ".join(f"{s} p50 ms (min-max) | {s} req/s" for s in systems) + " |",
             "|---|" + "---|---|" * len(systems)]
    for key, by_system in data["summary"].items():
        cells = [f"{v['p50_ms']:.2f} ({v['p50_min']:.2f}-{v['p50_max']:.2f}) | {v['requests_per_s']:,.0f}"
                 for v in by_system.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    hops = [(f"{system} {i}", r["hops_ms"]) for system, results in data["rounds"].items()
            for i, r in enumerate(results) if r.get("hops_ms")]
    if hops:
        phases = list(hops[0][1])
        lines += ["", "Server-side time per hop, ms (x-*-time headers, median of 200 sequential requests, per round):",
                  "", "| system, round | " + " | ".join(phases) + " |", "|---|" + "---|" * len(phases)]
        lines += [f"| {name} | " + " | ".join(f"{h[p]:.3f}" for p in phases) + " |" for name, h in hops]
    return lines + [f"\n{len(next(iter(data['rounds'].values())))} round(s) per system, alternating; a fresh server "
                    "process each."]


def linear_act_table(data: dict) -> list[str]:
    """linear_act_bench.py: per shape and token count, cuBLAS's rows and the fastest fused tile of each load kind."""
    groups: dict[tuple, dict] = {}
    for row in data["rows"]:
        if "us" in row:
            groups.setdefault((row["shape"], row["tokens"]), {})[row["variant"]] = row["us"]
    lines = ["| shape | tokens | cuBLAS (+ activation kernel) us | cuBLAS matmul alone us | cuBLASLt tanh-GELU us | "
             "fused, pointer loads: best us (tile) | fused, TMA: best us (tile) | best fused / cuBLAS (+ act) |",
             "|---|---|---|---|---|---|---|---|"]
    for (shape, tokens), us in groups.items():
        base_name = next(iter(us))
        fused = {kind: min(((v, n) for n, v in us.items() if n.startswith("fused ") and ("tma" in n) == tma),
                           default=None) for kind, tma in (("pointer", False), ("tma", True))}
        best = min((f[0] for f in fused.values() if f), default=float("nan"))
        cell = lambda f: f"{f[0]:.1f} ({f[1][6:]})" if f else "-"  # noqa: E731
        alone, tanh = us.get("cublas alone"), us.get("cublasLt-gelu-tanh")
        lines.append(f"| {shape} | {tokens} | {us[base_name]:.1f} | {f'{alone:.1f}' if alone else '-'} | "
                     f"{f'{tanh:.1f}' if tanh else '-'} | {cell(fused['pointer'])} | {cell(fused['tma'])} | "
                     f"{best / us[base_name]:.2f} |")
    copies = sorted({row["weight_copies"] for row in data["rows"] if row.get("weight_copies")})
    where = (f"each call on its own copy of the weights where there are several ({copies[0]}-{copies[-1]} copies: "
             "read from HBM, as a model's layers read theirs)" if copies else "all on one copy of the weights (L2-hot)")
    return lines + [f"\nDevice time per call, the calls replayed in one CUDA graph, {where}; {data['device']}, "
                    f"torch {data['torch']}."]


def split_k_table(data: dict) -> list[str]:
    """split_k_bench.py: per shape and token count, cuBLAS + norm, split_config's pick + norm, the fastest swept."""
    groups: dict[tuple, dict] = {}
    for row in data["rows"]:
        if "us" in row:
            groups.setdefault((row["shape"], row["tokens"]), {})[row["variant"]] = (row["us"], row["config"])
    lines = ["| shape | tokens | cuBLAS + norm us | split (picked) + norm us (tiles, splits) | fastest swept us | "
             "picked / cuBLAS |", "|---|---|---|---|---|---|"]
    for (shape, tokens), us in groups.items():
        base, (picked, config) = us["cublas+norm"][0], us["split"]
        swept = min(((v[0], n[6:]) for n, v in us.items() if n.startswith("split ")), default=None)
        lines.append(f"| {shape} | {tokens} | {base:.1f} | {picked:.1f} ({config['block_m']}x{config['block_n']}x"
                     f"{config['block_k']}, {config['splits']}) | {f'{swept[0]:.1f} ({swept[1]})' if swept else '-'} | "
                     f"{picked / base:.2f} |")
    return lines + [f"\nDevice time per call of the pair (matmul, add-and-norm), the calls replayed in one CUDA graph, "
                    f"each on its own copy of the weights; {data['device']}, torch {data['torch']}."]


def main():
    root = Path(sys.argv[1])
    for path in sorted(root.rglob("*.json")):
        data = json.loads(path.read_text())
        if path.name == "latency-ab.json":
            lines = latency_table(data)
        elif path.name == "serve-online-ab.json":
            lines = serve_table(data)
        elif path.name == "linear-act.json":
            lines = linear_act_table(data)
        elif path.name.startswith("split-k"):
            lines = split_k_table(data)
        else:
            continue
        print(f"### {path.relative_to(root).parent} / {path.name}\n")
        print("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
