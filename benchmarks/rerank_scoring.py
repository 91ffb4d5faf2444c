"""Rerankers (issue 23): the seed's scoring suite, a query and 5 / 25 / 50 documents of 512 tokens a pair.

    python benchmarks/rerank_scoring.py            # on the GPU: bert-base-cross-encoder, qwen3-reranker-0.6b, 3 rounds
    python benchmarks/rerank_scoring.py --quick    # CPU smoke run: the tiny rerankers, 2 rounds

A request is what a reranking user sees: the query and its documents in as texts, the scores on the host out,
tokenisation included for every system. Each system runs in its own fresh process (isolation.py), in rounds that
alternate ours and the peer, on the same texts from one file; every figure is the median of the rounds with
their range, and "vs" is taken round by round.
  ours                    embedpipe.Reranker(folder, max_length=512).score(query, documents)
  sentence-transformers   CrossEncoder(folder, max_length=512, bf16).predict(pairs): its default batch of 32, and
                          every pair in one batch (cross-encoders)
  transformers            Qwen3-Reranker's model card (AutoModelForCausalLM, bf16, SDPA, the left-padded batch, P(yes)
                          from the last token's yes / no logits): as the card has it (every position's logits), and
                          with logits_to_keep=1 (the last position's only)
The random-weight folders use the default tokenizer (30,522 ids), so the card's full logits cost the peer less
than on Qwen3-Reranker's 151,669. Agreement: each system returns its scores of the 50-document request; the
largest difference from ours is recorded (bf16 everywhere: not bit-equal).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common import environment, gpu_clocks, percentiles, run_dtype, time_calls, write_results  # noqa: E402
from isolation import (Deadline, ratio, round_robin, same_process_check, start_workers, stop_workers,  # noqa: E402
                       summarize)
from workloads import vocabulary_words  # noqa: E402

MODELS = {"bert-base-cross-encoder": "sentence-transformers", "qwen3-reranker-0.6b": "transformers"}
QUICK_MODELS = {"tiny-bert-cross-encoder": "sentence-transformers", "tiny-qwen3-reranker": "transformers"}
AGREEMENT_ABS = 0.02  # the largest score difference from ours (scores are probabilities) before a warning
QUERY_WORDS = 8


# ---- in the worker process
def prepare(task: dict) -> dict:
    """{"calls": {variant: call(query, documents) -> float32 scores}}, loaded, nothing timed."""
    folder, device, system, max_length = task["folder"], task["device"], task["system"], task["max_length"]
    if system == "ours":
        import embedpipe
        reranker = embedpipe.Reranker(folder, device=device, max_length=max_length)
        return {"calls": {"ours": lambda query, documents: reranker.score(query, documents)}}
    if system == "sentence-transformers":
        return {"calls": cross_encoder_calls(folder, device, max_length)}
    return {"calls": qwen3_card_calls(folder, device, max_length)}


def cross_encoder_calls(folder: str, device: str, max_length: int) -> dict:
    from sentence_transformers import CrossEncoder
    model = CrossEncoder(folder, device=device, max_length=max_length,
                         model_kwargs={"torch_dtype": run_dtype(device)})

    def predict(query, documents, batch_size):
        return np.asarray(model.predict([(query, d) for d in documents], batch_size=batch_size), dtype=np.float32)
    return {"sentence-transformers": lambda q, docs: predict(q, docs, 32),
            "sentence-transformers-one-batch": lambda q, docs: predict(q, docs, len(docs))}


def qwen3_card_calls(folder: str, device: str, max_length: int) -> dict:
    """huggingface.co/Qwen/Qwen3-Reranker-0.6B, "Transformers Usage": format_instruction, process_inputs and
    compute_logits, with the card's default instruction."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from embedpipe.pipeline.text.pairs import (QWEN3_RERANKER_INSTRUCTION, QWEN3_RERANKER_PREFIX,
                                               QWEN3_RERANKER_SUFFIX)
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=run_dtype(device), attn_implementation="sdpa")
    model = model.to(device).eval()
    prefix = tokenizer.encode(QWEN3_RERANKER_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(QWEN3_RERANKER_SUFFIX, add_special_tokens=False)
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")

    @torch.no_grad()
    def score(query, documents, **model_kwargs):
        pairs = [f"<Instruct>: {QWEN3_RERANKER_INSTRUCTION}\n<Query>: {query}\n<Document>: {d}" for d in documents]
        inputs = tokenizer(pairs, padding=False, truncation="longest_first", return_attention_mask=False,
                           max_length=max_length - len(prefix) - len(suffix))
        inputs["input_ids"] = [prefix + ids + suffix for ids in inputs["input_ids"]]
        inputs = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=max_length).to(device)
        logits = model(**inputs, **model_kwargs).logits[:, -1, :]
        pair = torch.nn.functional.log_softmax(torch.stack([logits[:, no], logits[:, yes]], dim=1), dim=1)
        return pair[:, 1].exp().float().cpu().numpy()
    return {"transformers": score, "transformers-last-logits": lambda q, docs: score(q, docs, logits_to_keep=1)}


def measure(state: dict, task: dict) -> tuple[dict, dict]:
    """Percentiles of every batch size for every variant; each variant's scores of the largest batch (untimed)."""
    inputs, sizes = json.loads(Path(task["inputs"]).read_text()), task["sizes"]
    query, documents = inputs["query"], inputs["documents"]
    ours = task["system"] == "ours"
    iters, seconds, min_samples = (sizes["iters"], sizes["seconds"], sizes["min_samples"]) if ours else \
        (sizes["peer_iters"], sizes["peer_seconds"], sizes["peer_min_samples"])
    warmup = 5 if ours else 2  # on CUDA ours runs a new graph key eagerly, captures it, then replays
    scores = {name: np.asarray(call(query, documents), dtype=np.float32) for name, call in state["calls"].items()}
    result = {}
    for n in sizes["batches"]:
        docs = documents[:n]
        result[str(n)] = {name: percentiles(time_calls(lambda: call(query, docs), iters, warmup, seconds,
                                                       min_samples))
                          for name, call in state["calls"].items()}
    return {"scoring": result}, scores


# ---- in the coordinator
def write_inputs(path: Path, folder: Path, num_docs: int, doc_tokens: int) -> dict:
    """A query of a few words and documents longer than doc_tokens (every pair is cut to max_length)."""
    _, words = vocabulary_words(folder)
    rng = np.random.default_rng(0)
    inputs = {"query": " ".join(rng.choice(words, size=QUERY_WORDS).tolist()),
              "documents": [" ".join(rng.choice(words, size=doc_tokens).tolist()) for _ in range(num_docs)]}
    path.write_text(json.dumps(inputs))
    return inputs


def pair_tokens(folder: Path, inputs: dict, max_length: int) -> list[int]:
    """Tokens of each pair as our tokenizer cut them (the same count the peers pad to)."""
    from types import SimpleNamespace

    from embedpipe.kernels.models.model_folder import read_model_folder
    from embedpipe.pipeline.text.pairs import make_pair_tokenizer
    folder = SimpleNamespace(folder=read_model_folder(str(folder), task="score"))
    tokenizer = make_pair_tokenizer(folder, max_length)
    return [len(ids) for ids in tokenizer.encode(inputs["query"], inputs["documents"], True).ids]


def bench_model(name: str, peer: str, args, work: Path, deadline: Deadline) -> dict:
    from embedpipe.kernels.testing.random_model import write_random_model
    folder = work / name
    with torch.device(args.device):  # random weights drawn on the GPU: seconds
        write_random_model(name, folder)
    inputs_file = work / f"{name}-inputs.json"
    inputs = write_inputs(inputs_file, folder, max(args.batches), args.doc_words)
    task = {"module": "rerank_scoring", "folder": str(folder), "device": args.device, "inputs": str(inputs_file),
            "max_length": args.max_length, "sizes": sizes_of(args)}
    systems = ["ours", peer]
    tasks = [(f"{s}-{r}", {**task, "system": s}) for r in range(args.rounds) for s in systems]
    workers = start_workers(tasks, work / f"{name}-workers", deadline)
    try:
        def run_one(system, r):
            start = time.perf_counter()
            result = workers[f"{system}-{r}"].run(deadline)
            print(f"  {name} round {r} {system:22s} {time.perf_counter() - start:5.1f} s", flush=True)
            return result
        rounds, cut = round_robin(systems, args.rounds, run_one, deadline, name)
    finally:
        stop_workers(workers)
    return summary(rounds, cut, peer, pair_tokens(folder, inputs, args.max_length))


def summary(rounds: dict, cut: str | None, peer: str, tokens: list[int]) -> dict:
    results = {system: [r for r, _ in values] for system, values in rounds.items()}
    pids = {system: [r["pid"] for r in values] for system, values in results.items()}
    same_process_check(pids)
    ours_scores = rounds["ours"][0][1]["ours"]
    peer_scores = rounds[peer][0][1]
    agreement = {name: float(np.abs(scores - ours_scores).max()) for name, scores in peer_scores.items()}
    for name, diff in agreement.items():
        if diff > AGREEMENT_ABS:
            print(f"WARNING: {name}'s scores differ from ours by up to {diff:.4f}", flush=True)
    out = {"peer": peer, "rounds": len(results["ours"]), "pids": pids, "pair_tokens": tokens,
           "agreement_max_abs": agreement, "scores_range": [float(ours_scores.min()), float(ours_scores.max())],
           "clocks": {s: [{"before": r["clocks_before"], "after": r["clocks_after"]} for r in values]
                      for s, values in results.items()}, "scoring": {}}
    if cut:
        out["rounds_cut"] = cut
    for size in results["ours"][0]["scoring"]:
        per_variant = {name: [r["scoring"][size][name] for r in values]
                       for values in results.values() for name in values[0]["scoring"][size]}
        row = out["scoring"][size] = {name: summarize(stats) for name, stats in per_variant.items()}
        row["vs"] = {name: ratio(per_variant["ours"], per_variant[name], "p50", False)
                     for name in per_variant if name != "ours"}
    return out


def sizes_of(args) -> dict:
    return {"batches": args.batches, "iters": args.iters, "seconds": args.seconds, "min_samples": args.min_samples,
            "peer_iters": args.peer_iters, "peer_seconds": args.seconds, "peer_min_samples": args.peer_min_samples}


def table(models: dict) -> str:
    lines = ["| model | documents | system | p50 ms (median, min-max) | p90 | p99 | ours vs it (p50, min-max) |",
             "|---|---|---|---|---|---|---|"]
    for name, m in models.items():
        for size, row in m["scoring"].items():
            for system, stats in row.items():
                if system == "vs":
                    continue
                p50, vs = stats["p50"], row["vs"].get(system)
                against = "-" if vs is None else f"{vs['median']:.2f}x ({vs['min']:.2f}-{vs['max']:.2f})"
                median = f"{p50['median']:.2f} ({p50['min']:.2f}-{p50['max']:.2f})"
                lines.append(f"| {name} | {size} | {system} | {median} | "
                             f"{stats['p90']['median']:.2f} | {stats['p99']['median']:.2f} | {against} |")
    agreement = [f"{name}: {system} {diff:.4f}" for name, m in models.items()
                 for system, diff in m["agreement_max_abs"].items()]
    return ("\n".join(lines) + "\n\nLargest score difference from ours (the largest request): "
            + "; ".join(agreement) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help=f"comma-separated (default: {','.join(MODELS)})")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=lambda s: [int(v) for v in s.split(",")], default=[5, 25, 50])
    parser.add_argument("--max-length", type=int, default=512, help="tokens a pair")
    parser.add_argument("--doc-words", type=int, default=600, help="words a document (more than a pair holds)")
    parser.add_argument("--iters", type=int, default=100, help="our calls per series and round (at most)")
    parser.add_argument("--min-samples", type=int, default=30)
    parser.add_argument("--peer-iters", type=int, default=40)
    parser.add_argument("--peer-min-samples", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=1.0, help="a series stops after this, once it has its minimum")
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: the tiny rerankers, small sizes")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/DATE-rerank-scoring")
    args = parser.parse_args()
    models = QUICK_MODELS if args.quick else MODELS
    if args.quick:
        args.device, args.rounds, args.batches, args.max_length, args.doc_words = "cpu", 2, [2, 5], 160, 200
        args.iters, args.min_samples, args.peer_iters, args.peer_min_samples, args.seconds = 4, 3, 3, 3, 0.0
    if args.models:
        known = {**MODELS, **QUICK_MODELS}
        models = {name: known[name] for name in args.models.split(",")}
    out = args.out or Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-rerank-scoring"
    deadline, results = Deadline(args.budget_s), {"environment": environment() | gpu_clocks(),
                                                   "command": " ".join(["python", *sys.argv]), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, peer in models.items():
            results["models"][name] = bench_model(name, peer, args, Path(tmp), deadline)
            write_results(results, out, table(results["models"]))
    print(table(results["models"]))


if __name__ == "__main__":
    main()
