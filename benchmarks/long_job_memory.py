"""Host memory over a long `embedpipe index` job: does RSS grow with the rows processed?

    python benchmarks/long_job_memory.py [--rows 200000] [--model tiny-bert|minilm] [--out DIR]

Writes `--rows` short rows (one or two sentences of tests/data/texts.jsonl) as Parquet, runs
`embedpipe index` on them as a process (CPU, `--rows-per-unit 10000`), and every 0.5 s samples the
RSS of the process and of it with its children, with the number of units done so far. The
embedding phase ends when the last unit is recorded; the FAISS index is built after it (a Flat
index holds every vector, so that phase grows with the rows by design). Reports RSS after the
first unit, the peak and the last sample of the embedding phase, the overall peak, and the
slope of RSS over rows done (least squares over the embedding phase after its first unit).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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

from common import environment, model_folder, tree_rss

TEXTS_FILE = Path(__file__).parent.parent / "tests" / "data" / "texts.jsonl"
SENTENCE_END = re.compile(r"(?<=[.!?。])\s+")
ROWS_PER_UNIT = 10_000
SAMPLE_S = 0.5
MIB = 2 ** 20


def short_texts(num_rows: int, seed: int = 0) -> list[str]:
    """Rows of one or two sentences, picked at random."""
    texts = [json.loads(line)["text"] for line in TEXTS_FILE.read_text().splitlines()]
    sentences = [s.strip() for t in texts for s in SENTENCE_END.split(t) if 10 < len(s.strip()) < 200]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(sentences), size=(num_rows, 2))
    two = rng.random(num_rows) < 0.3
    return [sentences[a] + (" " + sentences[b] if both else "") for (a, b), both in zip(picks.tolist(), two)]


def sample(process: psutil.Popen, output: Path) -> list[dict]:
    """Samples every SAMPLE_S until the process ends: seconds, units done, RSS of it / with children (MiB)."""
    start, samples = time.monotonic(), []
    while process.poll() is None and (rss := tree_rss(process)) is not None:
        main, children = rss
        manifest = output / "manifest"
        units = len([n for n in os.listdir(manifest) if not n.startswith(".")]) if manifest.is_dir() else 0
        samples.append({"s": round(time.monotonic() - start, 2), "units_done": units,
                        "rss_mib": round(main / MIB, 1), "rss_with_children_mib": round((main + children) / MIB, 1)})
        time.sleep(SAMPLE_S)
    return samples


def summarize(samples: list[dict], num_units: int) -> dict:
    """RSS (with children) over the embedding phase: after the first unit, before the index is built."""
    embedding = [s for s in samples if 1 <= s["units_done"] < num_units] or samples
    rss = np.array([s["rss_with_children_mib"] for s in embedding])
    units = np.array([s["units_done"] for s in embedding])
    quarters = np.array_split(np.unique(units), 4)  # the units done, in four runs of equal length
    per_unit = [(u * ROWS_PER_UNIT, float(np.median(rss[units == u]))) for u in np.unique(units)]
    slope = np.polyfit(*zip(*per_unit), 1)[0] * 100_000 if len(per_unit) > 1 else float("nan")
    return {"rss_after_first_unit_mib": float(rss[0]), "rss_peak_embedding_mib": float(rss.max()),
            "rss_end_embedding_mib": float(rss[-1]), "rss_min_embedding_mib": float(rss.min()),
            "rss_median_by_quarter_mib": [float(np.median(rss[np.isin(units, q)])) for q in quarters if len(q)],
            "slope_of_unit_medians_mib_per_100k_rows": round(float(slope), 2),
            "rss_peak_overall_mib": max(s["rss_with_children_mib"] for s in samples),
            "num_samples_embedding": len(embedding)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--model", default="tiny-bert", help="tiny-bert (random weights) or minilm")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the job")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "2026-11-29-cpu-long-job")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        texts = short_texts(args.rows)
        pq.write_table(pa.table({"id": np.arange(args.rows), "text": texts}), tmp / "rows.parquet", row_group_size=2000)
        model = "minilm" if args.model == "minilm" else str(model_folder(args.model, tmp / "models"))
        command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(tmp / "rows.parquet"), "--output",
                   str(tmp / "out"), "--model", model, "--device", "cpu", "--rows-per-unit", str(ROWS_PER_UNIT)]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        process = psutil.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
        samples = sample(process, tmp / "out")
        stderr = process.stderr.read()
        if process.wait() != 0:
            raise RuntimeError(f"index failed: {stderr}")
        metrics = json.loads((tmp / "out" / "metrics.json").read_text())
    num_units = -(-args.rows // ROWS_PER_UNIT)
    results = {"environment": {**environment(), "cpus": psutil.cpu_count(), "machine": platform.platform(),
                               "omp_num_threads": args.threads, "model": args.model},
               "rows": metrics["rows"], "units": num_units, "job_seconds": metrics["seconds"],
               "embeddings_per_s": metrics["embeddings_per_s"], "tokens": metrics["tokens"],
               "summary": summarize(samples, num_units), "samples": samples, "log": stderr.splitlines()[-1:]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.model}-{args.rows}.json").write_text(json.dumps(results, indent=1))
    print(json.dumps({key: value for key, value in results.items() if key != "samples"}, indent=1))


if __name__ == "__main__":
    main()
