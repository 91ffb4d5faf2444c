"""GPU check of `embedpipe index`: end to end against the engine alone on the same texts, same run.

    python benchmarks/gpu_index_check.py --shape bert-base --rows 100000 [--tokenizer tokenizer.json] [--out DIR]

Writes a random-weight model folder of the shape (benchmarks/common.py), a corpus like the CPU
benchmark's, runs `embedpipe index` on CUDA as a subprocess (reading, tokenising in workers,
two batches in flight, writing, the FAISS index), then the engine alone on the pre-tokenised
texts (no I/O), and checks a sample of the written vectors against the engine's (cosine).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from common import environment, write_results
from cpu_index_bench import make_texts, write_corpus
from embedpipe.kernels import random_model
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.pipeline.embed import embed_token_ids, make_tokenizer

SAMPLE_ROWS = 2000


def write_model(shape: str, folder: Path, tokenizer: Path | None) -> Path:
    """A random-weight folder; `tokenizer` stands in for the default model's where it is not installed."""
    if tokenizer is not None:
        random_model.builtin_models = lambda: {"minilm": tokenizer.parent}
    random_model.write_random_model(shape, folder)
    return folder


def run_index(corpus: Path, model: Path, output: Path, device: str, extra: list[str]) -> dict:
    command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus), "--output", str(output),
               "--model", str(model), "--device", device, "--quiet", *extra]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    wall_s = time.perf_counter() - start
    metrics = json.loads((output / "metrics.json").read_text())
    return {"wall_s": wall_s, **{key: metrics[key] for key in (
        "rows", "tokens", "seconds", "tokens_per_s", "embeddings_per_s", "padding_waste", "batches", "engine")}}


def engine_alone(model: Path, texts: list[str], device: str) -> tuple[dict, Engine, list]:
    engine = Engine(EngineConfig(model=str(model), device=device))
    token_ids, _ = make_tokenizer(engine).encode(texts)
    embed_token_ids(engine, token_ids[:4096])  # warm-up: graph captures
    start = time.perf_counter()
    embed_token_ids(engine, token_ids)
    seconds = time.perf_counter() - start
    num_tokens = sum(map(len, token_ids))
    return {"seconds": seconds, "texts_per_s": len(texts) / seconds, "tokens_per_s": num_tokens / seconds}, engine, token_ids


def min_cosine(output: Path, engine: Engine, token_ids: list, rows: np.ndarray) -> float:
    table = pq.read_table(output / "embeddings").sort_by("id")
    ours = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(table), -1)[rows]
    reference = embed_token_ids(engine, [token_ids[r] for r in rows]).astype(np.float64)
    ours = ours.astype(np.float64)
    return float(((ours * reference).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(reference, axis=1)).min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="bert-base")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tokenizer", type=Path, default=None)
    parser.add_argument("--index-args", default="", help="extra `embedpipe index` options")
    parser.add_argument("--device", default="cuda", help="cpu only to try the script itself")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-gpu-index")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = write_model(args.shape, tmp / args.shape, args.tokenizer)
        texts = make_texts(args.rows)
        corpus = write_corpus(tmp / "corpus.parquet", texts)
        ours = run_index(corpus, model, tmp / "out", args.device, args.index_args.split())
        alone, engine, token_ids = engine_alone(model, texts, args.device)
        sample = np.random.default_rng(0).choice(args.rows, size=min(SAMPLE_ROWS, args.rows), replace=False)
        results = {"environment": environment(), "shape": args.shape, "rows": args.rows, "index": ours,
                   "engine_alone": alone, "min_cosine_sample": min_cosine(tmp / "out", engine, token_ids, sample)}
    table = (f"| {args.shape}, {args.rows} rows | texts/s | tokens/s |\n|---|---|---|\n"
             f"| embedpipe index (job) | {ours['embeddings_per_s']:.0f} | {ours['tokens_per_s']:.0f} |\n"
             f"| engine alone, pre-tokenised, no I/O | {alone['texts_per_s']:.0f} | {alone['tokens_per_s']:.0f} |\n")
    write_results(results, args.out, table)
    print(json.dumps(results, indent=1))
    print(table)


if __name__ == "__main__":
    main()
