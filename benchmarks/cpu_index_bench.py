"""CPU indexing benchmark: `embedpipe index` end to end against sentence-transformers `encode`, same run.

    python benchmarks/cpu_index_bench.py [--rows 10000 20000] [--out benchmarks/results/DATE-cpu-index]

The corpus recombines the sentences of tests/data/texts.jsonl into rows of realistic lengths
(most short, some long) and is written as Parquet. `embedpipe index` runs as a user runs it (a
subprocess: reading, tokenising, embedding, writing, the FAISS index) while its peak RSS is
sampled; sentence-transformers encodes the same texts in memory (batch 64, same max length, no
I/O). Texts/s of ours is reported from the process's wall time (model load included) and from
the job's own clock (metrics.json: read, tokenise, embed, write).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from common import environment, tree_rss, write_results
from embedpipe.kernels.models.model_folder import builtin_models

TEXTS_FILE = Path(__file__).parent.parent / "tests" / "data" / "texts.jsonl"
SENTENCE_END = re.compile(r"(?<=[.!?。])\s+")
LENGTH_CLASSES = ((0.70, 1, 2), (0.25, 3, 5), (0.05, 8, 16))  # share of rows, min and max sentences
RSS_SAMPLE_S = 0.05


def make_texts(num_rows: int, seed: int = 0) -> list[str]:
    """Rows of 1-2 sentences (70%), 3-5 (25%) or 8-16 (5%, mostly past 256 tokens), picked at random."""
    texts = [json.loads(line)["text"] for line in TEXTS_FILE.read_text().splitlines()]
    sentences = [s.strip() for t in texts for s in SENTENCE_END.split(t) if s.strip()]
    rng = np.random.default_rng(seed)
    shares = np.array([share for share, _, _ in LENGTH_CLASSES])
    rows = []
    for cls in rng.choice(len(LENGTH_CLASSES), size=num_rows, p=shares / shares.sum()):
        _, low, high = LENGTH_CLASSES[cls]
        picked = rng.choice(len(sentences), size=rng.integers(low, high + 1))
        rows.append(" ".join(sentences[i] for i in picked))
    return rows


def write_corpus(path: Path, texts: list[str]) -> Path:
    pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), path, row_group_size=2048)
    return path


def run_index(corpus: Path, output: Path, extra: list[str]) -> dict:
    """Runs `embedpipe index` and samples the RSS of the process and of it with its workers."""
    command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus), "--output", str(output),
               "--device", "cpu", "--quiet", *extra]
    start = time.perf_counter()
    process = psutil.Popen(command, stderr=subprocess.PIPE, text=True)
    samples, peak_all = [], 0
    while process.poll() is None and (rss := tree_rss(process)) is not None:
        main, workers = rss
        samples.append(main)
        peak_all = max(peak_all, main + workers)
        time.sleep(RSS_SAMPLE_S)
    wall_s = time.perf_counter() - start
    if process.wait() != 0:
        raise RuntimeError(f"index failed: {process.stderr.read()}")
    metrics = json.loads((output / "metrics.json").read_text())
    return {"rows": metrics["rows"], "wall_s": wall_s, "job_s": metrics["seconds"],
            "texts_per_s_wall": metrics["rows"] / wall_s, "texts_per_s_job": metrics["embeddings_per_s"],
            "tokens_per_s_job": metrics["tokens_per_s"], "padding_waste": metrics["padding_waste"],
            "truncated_texts": metrics["truncated_texts"], "peak_rss_mib": max(samples) / 2**20,
            "median_rss_mib": float(np.median(samples)) / 2**20, "peak_rss_with_workers_mib": peak_all / 2**20}


def run_sentence_transformers(texts: list[str]) -> tuple[dict, np.ndarray]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(builtin_models()["minilm"]), device="cpu")
    model.encode(texts[:64], batch_size=64)  # warm-up
    start = time.perf_counter()
    vectors = model.encode(texts, batch_size=64)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "texts_per_s": len(texts) / seconds, "max_seq_length": model.max_seq_length}, vectors


def min_cosine(output: Path, reference: np.ndarray) -> float:
    table = pq.read_table(output / "embeddings").sort_by("id")
    ours = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(table), -1)
    ours, reference = ours.astype(np.float64), reference.astype(np.float64)
    cos = (ours * reference).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(reference, axis=1)
    return float(cos.min())


def table_md(results: dict) -> str:
    lines = ["| rows | ours texts/s (job) | ours texts/s (wall, incl. start-up) | sentence-transformers texts/s "
             "| ours / ST (job) | RSS MiB: median / peak / peak with workers |", "|---|---|---|---|---|---|"]
    for rows, entry in results["runs"].items():
        ours, st = entry["embedpipe"], entry.get("sentence_transformers")
        st_rate = f"{st['texts_per_s']:.1f}" if st else "-"
        ratio = f"{ours['texts_per_s_job'] / st['texts_per_s']:.2f}" if st else "-"
        lines.append(f"| {rows} | {ours['texts_per_s_job']:.1f} | {ours['texts_per_s_wall']:.1f} | {st_rate} | {ratio} "
                     f"| {ours['median_rss_mib']:.0f} / {ours['peak_rss_mib']:.0f} / "
                     f"{ours['peak_rss_with_workers_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10000, 20000])
    parser.add_argument("--peer-rows", type=int, default=None,
                        help="rows sentence-transformers encodes (default: the largest)")
    parser.add_argument("--index-args", default="", help="extra `embedpipe index` options, e.g. '--workers 0'")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-cpu-index")
    args = parser.parse_args()
    peer_rows = args.peer_rows or max(args.rows)
    results = {"environment": {**environment(), "cpus": psutil.cpu_count(), "model": "all-MiniLM-L6-v2"},
               "index_args": args.index_args, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for rows in args.rows:
            texts = make_texts(rows)
            corpus = write_corpus(Path(tmp) / f"corpus-{rows}.parquet", texts)
            entry = results["runs"][rows] = {"embedpipe": run_index(corpus, Path(tmp) / f"out-{rows}",
                                                                    args.index_args.split())}
            if rows == peer_rows:
                entry["sentence_transformers"], vectors = run_sentence_transformers(texts)
                entry["min_cosine_vs_sentence_transformers"] = min_cosine(Path(tmp) / f"out-{rows}", vectors)
            print(json.dumps({rows: entry}, indent=1), flush=True)
    write_results(results, args.out, table_md(results))
    print(table_md(results))


if __name__ == "__main__":
    main()
