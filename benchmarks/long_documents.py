"""Long documents (issue 21): `embedpipe index` on a corpus of 2k-8k-token documents, three ways.

    python benchmarks/long_documents.py --models qwen3-0.6b,pplx-embed-0.6b --docs 1500 --rounds 3
    python benchmarks/long_documents.py --quick      # CPU smoke run on a tiny model

Each run is a fresh `embedpipe index` process (suite_indexing.run_index: job clock from metrics.json,
GPU busy sampled by nvidia-smi), and the three ways alternate round by round on the same corpus:
  truncate   one vector per document (the random Qwen3-shaped folders keep 8192 tokens: nothing is cut)
  chunks     --chunk-tokens 256 --chunk-overlap 32: each window embedded on its own
  late       --late-chunking --chunk-tokens 256: each document runs once, its windows pooled by span
Rates: document tokens per second (the corpus's tokens over the job clock, the same numerator for all
three, so they compare the time to index the same text) and the tokens the engine actually ran.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common import environment, gpu_clocks, model_folder, warm_gpu, write_results  # noqa: E402
from suite_indexing import run_index  # noqa: E402
from workloads import vocabulary_words, write_corpus  # noqa: E402

WAYS = {"truncate": (), "chunks": ("--chunk-tokens", "256", "--chunk-overlap", "32"),
        "late": ("--late-chunking", "--chunk-tokens", "256")}
SENTENCE_WORDS = (8, 24)  # a sentence end after every 8-24 words


def documents(folder: Path, num_docs: int, token_range: tuple[int, int], seed: int = 0) -> tuple[list[str], int]:
    """Texts of random whole words in sentences, of about token_range tokens each; and their total tokens."""
    tokenizer, words = vocabulary_words(folder)
    rng = np.random.default_rng(seed)
    texts = []
    for length in rng.integers(*token_range, size=num_docs):
        chosen = rng.choice(words, size=int(length * 0.9)).tolist()
        ends = np.cumsum(rng.integers(*SENTENCE_WORDS, size=len(chosen)))
        for at in ends[ends < len(chosen)]:
            chosen[at] += "."
        texts.append(" ".join(chosen) + ".")
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    return texts, tokens


def bench_model(name: str, args, work: Path) -> dict:
    folder = model_folder(name, work / "models")
    texts, doc_tokens = documents(folder, args.docs, args.tokens)
    corpus = write_corpus(texts, work / f"{name}-docs.parquet")
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for round_ in range(args.rounds):
        for way, options in WAYS.items():
            clocks = warm_gpu() if args.device.startswith("cuda") else {}
            r = run_index(corpus, folder, work / f"out-{way}", args.device, options + tuple(args.option))
            r["doc_tokens_per_s"] = doc_tokens / r["job_s"]
            runs[way].append(r | {"clocks_before": clocks})
            print(f"{name} round {round_} {way}: {r['doc_tokens_per_s']:,.0f} document tokens/s, "
                  f"{r['rows']} rows, busy {r.get('gpu_busy_while_embedding', 0):.0%}", flush=True)
    return {"docs": args.docs, "doc_tokens": doc_tokens, "ways": {way: summary(rs) for way, rs in runs.items()}}


def summary(rounds: list[dict]) -> dict:
    """Median and spread (min, max) over the rounds of each figure, and the rounds themselves."""
    keys = ("doc_tokens_per_s", "tokens_per_s", "job_s", "wall_s", "gpu_busy_while_embedding")
    out = {"rows": rounds[0]["rows"], "rounds": rounds}
    for key in keys:
        values = [r[key] for r in rounds if key in r]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def table(models: dict) -> str:
    lines = ["| model | way | rows | document tokens/s (median, min-max) | engine tokens/s | job s | GPU busy |",
             "|---|---|---|---|---|---|---|"]
    for name, m in models.items():
        for way, w in m["ways"].items():
            d, busy = w["doc_tokens_per_s"], w.get("gpu_busy_while_embedding")
            lines.append(f"| {name} | {way} | {w['rows']:,} | {d['median']:,.0f} ({d['min']:,.0f}-{d['max']:,.0f}) | "
                         f"{w['tokens_per_s']['median']:,.0f} | {w['job_s']['median']:.1f} | "
                         f"{'-' if busy is None else format(busy['median'], '.0%')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen3-0.6b,pplx-embed-0.6b")
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--tokens", type=lambda s: tuple(map(int, s.split("-"))), default=(2000, 8000),
                        help="document lengths in tokens, LOW-HIGH")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--option", action="append", default=[], help="one more index option for every run")
    parser.add_argument("--quick", action="store_true", help="a CPU smoke run: tiny-qwen3, 8 documents, 1 round")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/DATE-long-documents")
    args = parser.parse_args()
    if args.quick:
        args.models, args.docs, args.tokens, args.rounds = "tiny-qwen3", 8, (300, 900), 1
    out = args.out or Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-long-documents"
    with tempfile.TemporaryDirectory() as tmp:
        models = {name: bench_model(name, args, Path(tmp)) for name in args.models.split(",")}
    results = {"environment": environment() | gpu_clocks(), "command": " ".join(["python", *sys.argv]),
               "models": models}
    write_results(results, out, table(models))
    print(table(models))


if __name__ == "__main__":
    main()
