"""The README's benchmark block: one compact table per suite from a results.json, and where we lose.

Every cell is the median of the run's rounds [min-max]; every ratio is taken round by round within that run.
"""
from __future__ import annotations

from report_tables import (PEERS, RUNS_ORDER, calls_note, cell, concurrency_rows, latency_rows, run_dates,
                           skipped_notes, table, times, where_we_lose)


def summary_tables(results: dict, source: str) -> list[str]:
    env, models, sizes = results["environment"], results["models"], results["sizes"]
    gpu = results["device"].startswith("cuda")
    runs = [f"`{r['command']}`, {r['seconds']:.0f} s" for r in results.get("runs", [])]
    lines = [f"{env.get('gpu') or 'CPU'}, {run_dates(results)}: torch {env['torch']}, "
             f"transformers {env['transformers']}, sentence-transformers {env['sentence_transformers']}, "
             f"{env['cpus']} CPU cores; "
             f"{len(runs)} run{'s' if len(runs) != 1 else ''} of `benchmarks/run.py` "
             f"({'; '.join(runs)}{'; ' + RUNS_ORDER if len(runs) > 1 else ''}). "
             f"Every system ran in its own fresh process"
             f"{', the GPU warmed before each timed series' if gpu else ''}, {sizes['rounds']} rounds alternating "
             f"ours and the peers: a cell is the median of the rounds [min-max], a ratio (how many times better ours "
             f"is) is taken round by round. Peers in {'bf16' if gpu else 'float32'}: transformers (AutoModel, SDPA, "
             f"one padded batch) and sentence-transformers. Every table, the clocks and the samples: "
             f"[`{source}/`]({source}/results.md).",
             "", "Suites 1-2, pre-tokenised, one request at a time (p50 ms):", "",
             *table(["model", "sequences x tokens", "ours", *PEERS, "vs transformers", "vs sentence-transformers"],
                    latency_rows(models, "latency", False) + latency_rows(models, "scoring", False)),
             f"Suite 3, requests of pre-tokenised sequences from {sizes['throughput_clients']} client processes "
             f"(embeddings/s; ours: `embedpipe serve --http-workers {sizes['http_workers']}`, the peer: "
             "sentence-transformers behind the same Starlette + uvicorn, one request at a time):", "",
             *table(["model", "sequences x tokens", "ours", "peer", "ours vs peer"], throughput(models)),
             "Suite 4, closed-loop clients, one text per request, tokenised in the server (ms):", "",
             *table(["model", "requests", "clients", "ours p50", "peer p50", "ours p99", "peer p99", "vs peer p50",
                     "vs peer requests/s"], concurrency_rows(models, False)),
             "Suite 5, Parquet in, Parquet + FAISS out (embeddings/s): `embedpipe index` against the script a user "
             "would write (`benchmarks/st_index.py`: pyarrow, `SentenceTransformer(..., model_kwargs={\"torch_dtype\": "
             "torch.bfloat16})`, `encode(texts, batch_size=256)`, Parquet, `faiss.IndexFlatIP`), each a fresh process; "
             "own clock: the job's clock, the script's `encode` alone; wall: the whole process, imports included:", "",
             *table(["model", "rows", "ours, job clock", "ours, wall", "script encode", "script wall",
                     "encode at batch 32 (first rows)", "vs encode", "vs wall", "vs batch 32"], indexing(models)),
             "Where we lose or tie (every ratio whose median is below 1x, or whose range spans it):", "",
             *where_we_lose(models), ""]
    if notes := skipped_notes(models, results["sizes"]["rounds"]):
        lines += ["Not measured in this run:", "", *notes, ""]
    return lines


def throughput(models: dict) -> list[list[str]]:
    return [[model, f"{row['sequences']} x {tokens}", cell(row["ours"], "embeddings_per_s", 0),
             cell(row["peer"], "embeddings_per_s", 0), times(row["vs"]["peer"])]
            for model, r in models.items() for tokens, row in (r.get("http") or {}).get("throughput", {}).items()]


def indexing(models: dict) -> list[list[str]]:
    rows = []
    for model, r in models.items():
        if not (x := r.get("indexing")):
            continue
        systems, vs = x["systems"], x["vs"]
        ours, st, st32 = (systems[k] for k in ("embedpipe index", "sentence-transformers (batch 256)",
                                              "sentence-transformers (batch 32)"))
        rows.append([model, f"{x['corpus']['rows']:,}{calls_note(x)}", cell(ours, "embeddings_per_s", 0),
                     cell(ours, "wall_embeddings_per_s", 0), cell(st, "embeddings_per_s", 0),
                     cell(st, "wall_embeddings_per_s", 0),
                     f"{cell(st32, 'embeddings_per_s', 0)} ({x['corpus']['default_batch_rows']:,})",
                     times(vs["sentence-transformers (batch 256)"]["own_clock"]),
                     times(vs["sentence-transformers (batch 256)"]["wall"]),
                     times(vs["sentence-transformers (batch 32)"]["own_clock"])])
    return rows
