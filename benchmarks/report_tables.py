"""results.json (format 2) -> Markdown tables: every figure as the median of its rounds [min-max], every ratio
taken round by round (ours and the peer of the same round), "x" meaning how many times better ours is."""
from __future__ import annotations

PEERS = ("transformers", "sentence-transformers")


def cell(summary: dict | None, key: str, digits: int = 2, unit: str = "") -> str:
    """'median [min-max]' of one summarised figure; '-' where it is missing."""
    value = (summary or {}).get(key)
    if not isinstance(value, dict):
        return "-"
    f = lambda v: f"{v:,.{digits}f}"
    return f"{f(value['median'])}{unit} [{f(value['min'])}-{f(value['max'])}]"


def times(ratio: dict | None) -> str:
    """A round-by-round ratio: '12.3x [11.9-12.8]'."""
    if not ratio:
        return "-"
    return f"{ratio['median']:.2f}x [{ratio['min']:.2f}-{ratio['max']:.2f}]"


def table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *["| " + " | ".join(row) + " |" for row in rows], ""]


def latency_rows(models: dict, group: str, full: bool) -> list[list[str]]:
    """Suites 1 (group "latency") and 2 ("scoring"): a row per model and size (full: per variant too)."""
    rows = []
    for model, r in models.items():
        suite = r.get("latency") or {}
        for size, row in suite.get(group, {}).items():
            case = f"1 x {size}" if group == "latency" else f"{size} x {suite['scoring_tokens']}"
            vs = [times(row["vs"].get(p)) for p in PEERS]
            if not full:
                rows.append([model, case, *[cell(row.get(v), "p50", 3) for v in ("ours", *PEERS)], *vs])
                continue
            for variant, s in row.items():
                if variant == "vs":
                    continue
                extra = (f"{s['weight_bandwidth_fraction']:.1%}" if group == "latency" else f"{s['mfu']:.1%}")
                rows.append([model, case, variant, *[cell(s, k, 3) for k in ("p50", "p90", "p99", "max")],
                             str(s.get("n", "-")), extra, *(vs if variant == "ours" else ["", ""])])
    return rows


def skipped_notes(models: dict, rounds: int) -> list[str]:
    """What a model did not run: lengths past its positions, suites past the budget or with fewer than the run's
    `rounds` (results["sizes"], the first call's), failed suites."""
    notes = [f"- {model}: batch 1 x {size} skipped ({why})" for model, r in models.items()
             for size, why in (r.get("latency") or {}).get("skipped_lengths", {}).items()]
    for model, r in models.items():
        notes += [f"- {model} / {suite}: {why}" for suite, why in r.get("skipped", {}).items()]
        notes += [f"- {model} / {suite}: FAILED, `{text.strip().splitlines()[-1]}`"
                  for suite, text in r.get("errors", {}).items()]
        for suite in ("latency", "http", "indexing"):
            entry = r.get(suite) or {}
            if entry.get("rounds_cut"):
                notes.append(f"- {model} / {suite}: {entry['rounds']} rounds ({entry['rounds_cut']})")
            elif entry.get("rounds", rounds) < rounds:
                notes.append(f"- {model} / {suite}: {entry['rounds']} rounds of the run's {rounds}")
    return notes


def throughput_rows(models: dict) -> list[list[str]]:
    rows = []
    for model, r in models.items():
        for tokens, row in (r.get("http") or {}).get("throughput", {}).items():
            for server in ("ours", "peer"):
                s = row[server]
                rows.append([model, f"{row['sequences']} x {tokens}", server, cell(s, "embeddings_per_s", 0),
                             cell(s, "tokens_per_s", 0), f"{s['mfu']:.1%}", cell(s, "request_p50", 1),
                             times(row["vs"]["peer"]) if server == "ours" else ""])
    return rows


def concurrency_rows(models: dict, full: bool) -> list[list[str]]:
    rows = []
    for model, r in models.items():
        for kind, entry in (r.get("http") or {}).get("concurrency", {}).items():
            for clients, row in entry["levels"].items():
                o, p = row["ours"], row["peer"]
                lead = [model, f"{kind}, {entry['tokens']} tokens", clients]
                if not full:
                    rows.append([*lead, cell(o, "p50"), cell(p, "p50"), cell(o, "p99"), cell(p, "p99"),
                                 times(row["vs"]["peer"]), times(row["vs"]["peer_requests_per_s"])])
                    continue
                for server, s in (("ours", o), ("peer", p)):
                    batch = cell(s, "mean_batch_sequences", 1)
                    rows.append([*lead, server, *[cell(s, k) for k in ("p50", "p90", "p99", "max")], str(s["n"]),
                                 cell(s, "requests_per_s", 0), batch,
                                 *((times(row["vs"]["peer"]), times(row["vs"]["peer_requests_per_s"]))
                                   if server == "ours" else ("", ""))])
    return rows


# how the runs of one results.json combine (report.merge), said once for results.md and the README block
RUNS_ORDER = ("in order, a later run replacing the suites of the models it names unless it adds rounds to them "
              "(--add-rounds, on the same machine and corpus)")


def run_dates(results: dict) -> str:
    """The day of the run, or the first and last day of the runs merged into it."""
    runs = [r for r in results.get("runs", []) if "environment" in r]
    days = sorted({results["environment"]["date"]} | {r["environment"]["date"] for r in runs})
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def calls_note(indexing: dict) -> str:
    """Where suite 5's rounds came from more than one call to one machine (run.py --add-rounds): how many each."""
    calls = indexing.get("rounds_per_call", [])
    return f"; rounds {' + '.join(map(str, calls))} from {len(calls)} calls to one machine" if len(calls) > 1 else ""


def indexing_rows(models: dict) -> list[list[str]]:
    rows = []
    for model, r in models.items():
        x = r.get("indexing")
        if not x:
            continue
        corpus = f"{x['corpus']['rows']:,} rows, median {x['corpus']['median_tokens']:.0f} tokens{calls_note(x)}"
        for system, s in x["systems"].items():
            vs = x["vs"].get(system, {})
            busy = cell(s, "gpu_busy_while_embedding", 2)
            rows.append([model, corpus if system == "embedpipe index" else
                         (f"first {x['corpus']['default_batch_rows']:,} rows" if "32" in system else ""),
                         system, cell(s, "embeddings_per_s", 0), cell(s, "wall_embeddings_per_s", 0),
                         cell(s, "wall_s", 1), busy, cell(s, "peak_rss_mib", 0),
                         times(vs.get("own_clock")), times(vs.get("wall"))])
    return rows


def where_we_lose(models: dict) -> list[str]:
    """Every round-by-round ratio whose median is below 1 (ours slower), and those whose range spans 1."""
    lose, close = [], []
    for label, r in ratios(models):
        (lose if r["median"] < 1 else close if r["min"] < 1 else []).append(f"{label}: {times(r)}")
    return ([f"- ours slower: {item}" for item in lose] + [f"- within the spread: {item}" for item in close]
            or ["- nowhere: ours was ahead in every round of every comparison"])


def ratios(models: dict):
    """(label, round-by-round ratio) of every comparison in the results."""
    for model, r in models.items():
        suite = r.get("latency") or {}
        for group, name in (("latency", "1 x {}"), ("scoring", "{} x " + str(suite.get("scoring_tokens")))):
            for size, row in suite.get(group, {}).items():
                for peer, value in row["vs"].items():
                    yield f"{model}, {name.format(size)} p50 vs {peer}", value
        http = r.get("http") or {}
        for tokens, row in http.get("throughput", {}).items():
            yield f"{model}, HTTP throughput {tokens} tokens vs the peer", row["vs"]["peer"]
        for kind, entry in http.get("concurrency", {}).items():
            for clients, row in entry["levels"].items():
                yield f"{model}, HTTP {kind} x {clients} clients p50 vs the peer", row["vs"]["peer"]
                yield (f"{model}, HTTP {kind} x {clients} clients requests/s vs the peer",
                       row["vs"]["peer_requests_per_s"])
        for system, vs in (r.get("indexing") or {}).get("vs", {}).items():
            for clock, value in vs.items():
                yield f"{model}, index ({clock.replace('_', ' ')}) vs {system}", value
