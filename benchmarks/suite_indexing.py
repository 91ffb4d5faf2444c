"""Suite 5, offline indexing end to end: Parquet in, Parquet + FAISS out, on a corpus of realistic lengths.

`embedpipe index` runs as a user runs it (a subprocess: reading, tokenising in workers,
embedding, writing, the FAISS index) while the GPU's busy fraction (NVML, through nvidia-smi)
and the job's RSS are sampled; its rates come from the job's own clock (metrics.json). The
engine alone then embeds the pre-tokenised corpus (no I/O) as ours and its ablations: no
double-buffering (one batch in flight), no CUDA graphs, and padded batches (every sequence
padded to the longest of its batch: the cost a padded engine pays). Peers embed the first
`peer_rows` rows: sentence-transformers `encode` on the texts (its own batching, sorted by
length) and transformers on padded batches of 32 token-id lists in input order.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq

from common import ST_BATCH, SentenceTransformersPeer, TransformersPeer, min_cosine, synchronize, tree_rss
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.graph_cache import GraphConfig
from embedpipe.kernels.models.model_folder import read_model_folder
from embedpipe.pipeline.batching.batcher import BatcherConfig, TokenBudgetBatcher
from embedpipe.pipeline.config import CPU_BATCH_TOKENS
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from workloads import corpus_lengths, texts_of_lengths, write_corpus

SAMPLE_S = 0.1
AGREEMENT = 0.999


class Sampler:
    """Samples a process tree's RSS and, on CUDA, the GPU's utilisation, in a thread."""

    def __init__(self, pid: int, gpu: bool):
        self.process, self.rss, self.busy = psutil.Process(pid), [], []
        self.nvidia = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                        f"-lms={int(SAMPLE_S * 1000)}", "-i", "0"], stdout=subprocess.PIPE, text=True,
                                       stderr=subprocess.DEVNULL) if gpu else None
        self.threads = [threading.Thread(target=self._rss, daemon=True)]
        if self.nvidia is not None:
            self.threads.append(threading.Thread(target=self._gpu, daemon=True))
        for thread in self.threads:
            thread.start()

    def _rss(self) -> None:
        while (rss := tree_rss(self.process)) is not None:
            self.rss.append(sum(rss))
            time.sleep(SAMPLE_S)

    def _gpu(self) -> None:
        for line in self.nvidia.stdout:
            if line.strip().isdigit():
                self.busy.append(int(line) / 100)

    def stop(self) -> dict:
        if self.nvidia is not None:
            self.nvidia.terminate()
        for thread in self.threads:
            thread.join(5)
        result = {"peak_rss_mib": max(self.rss, default=0) / 2**20}
        if self.busy:
            active = np.nonzero(self.busy)[0]  # from the first to the last busy sample: the job's embedding
            window = self.busy[active[0]:active[-1] + 1] if len(active) else []
            result["gpu_busy_while_embedding"] = float(np.mean(window)) if window else 0.0
            result["gpu_busy_whole_process"] = float(np.mean(self.busy))
        return result


def run_index(corpus: Path, folder: Path, output: Path, device: str) -> dict:
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus), "--output", str(output),
               "--model", str(folder), "--device", device, "--quiet"]
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(process.pid, device.startswith("cuda"))
    _, stderr = process.communicate()
    samples = sampler.stop()
    if process.returncode != 0:
        raise SystemExit(f"embedpipe index failed ({process.returncode}):\n{stderr}")
    metrics = json.loads((output / "metrics.json").read_text())
    return {"wall_s": time.perf_counter() - start, "job_s": metrics["seconds"], "rows": metrics["rows"],
            "embeddings_per_s": metrics["embeddings_per_s"], "tokens_per_s": metrics["tokens_per_s"],
            "padding_waste": metrics["padding_waste"], "index_rows": metrics["index"]["num_rows"], **samples}


def stream(engine: Engine, batches: list, in_flight: int) -> float:
    """Seconds to run `batches` with `in_flight` batches queued on the device."""
    synchronize(str(engine.device))
    start, pending = time.perf_counter(), deque()
    for batch in batches:
        pending.append(engine.step(batch))
        if len(pending) == in_flight:
            pending.popleft().result()
    while pending:
        pending.popleft().result()
    return time.perf_counter() - start


def ragged_batches(sequences: list[list[int]], budget: int) -> list:
    batcher = TokenBudgetBatcher(BatcherConfig(max_batch_tokens=budget))
    batches = []
    for i, ids in enumerate(sequences):
        batcher.add(ids, i)
        while (batch := batcher.next_batch()) is not None:
            batches.append(batch)
    while (batch := batcher.next_batch(flush=True)) is not None:
        batches.append(batch)
    return batches


def padded_batches(sequences: list[list[int]], budget: int, max_seqs: int = 512) -> list:
    """In input order, as many sequences per batch as fit `budget` once each is padded to the longest."""
    policy, batches, group = BucketPolicy(), [], []
    for ids in sequences:
        longest = max([len(ids)] + [len(s) for s in group])
        if group and (policy.pad_tokens(longest * (len(group) + 1)) > budget or len(group) == max_seqs):
            batches.append(_pad_group(group, policy))
            group = []
        group.append(ids)
    batches.append(_pad_group(group, policy))
    return batches


def _pad_group(group: list[list[int]], policy: BucketPolicy):
    longest = max(map(len, group))
    return pack([s + [0] * (longest - len(s)) for s in group], policy)


def engine_variants(folder: Path, device: str, sequences: list[list[int]], budget: int) -> dict:
    cuda = device.startswith("cuda")
    num_tokens = sum(map(len, sequences))
    ragged, padded = ragged_batches(sequences, budget), padded_batches(sequences, budget)
    # name: (engine, batches, batches in flight, warm-up passes: on CUDA the second hit of a key captures
    # its graph; no double-buffering runs the batches, and so the graphs, of "ours")
    runs = {"ours": ("graphs", ragged, 2, 2 if cuda else 1), "ours-no-double-buffer": ("graphs", ragged, 1, 0),
            "ours-padded": ("graphs", padded, 2, 2 if cuda else 1)}
    if cuda:
        runs["ours-no-graphs"] = ("eager", ragged, 2, 1)
    engines = {"graphs": Engine(EngineConfig(model=str(folder), device=device))}
    if cuda:
        engines["eager"] = Engine(EngineConfig(model=str(folder), device=device, graphs=GraphConfig(enabled=False)))
    result = {}
    for name, (kind, batches, in_flight, warmups) in runs.items():
        for _ in range(warmups):
            stream(engines[kind], batches[:64 if cuda else 1], in_flight)
        seconds = stream(engines[kind], batches, in_flight)
        result[name] = {"seconds": seconds, "embeddings_per_s": len(sequences) / seconds,
                        "tokens_per_s": num_tokens / seconds, "batches": len(batches)}
    return result


def peers(folder: Path, device: str, pooling: str, texts: list[str], sequences: list[list[int]]) -> tuple[dict, dict]:
    """Rates of the peers on the same rows, and their vectors (for the agreement check)."""
    num_tokens = sum(map(len, sequences))
    st = SentenceTransformersPeer(folder, device)
    st.encode(texts[:ST_BATCH])
    start = time.perf_counter()
    st_vectors = st.encode(texts)
    st_s = time.perf_counter() - start
    diagnostics = sentence_transformers_diagnostics(st, texts)
    del st
    hf = TransformersPeer(folder, pooling, device)
    hf(sequences[:ST_BATCH])
    start = time.perf_counter()
    hf_vectors = np.concatenate([hf(sequences[i:i + ST_BATCH]).numpy() for i in range(0, len(sequences), ST_BATCH)])
    hf_s = time.perf_counter() - start
    diagnostics["transformers_attention"] = hf.model.config._attn_implementation
    del hf
    rate = lambda s: {"seconds": s, "embeddings_per_s": len(texts) / s, "tokens_per_s": num_tokens / s}
    return ({"sentence-transformers": rate(st_s), "transformers": rate(hf_s)},
            {"sentence-transformers": st_vectors, "transformers": hf_vectors}, diagnostics)


def sentence_transformers_diagnostics(st: SentenceTransformersPeer, texts: list[str]) -> dict:
    """Why `encode` runs far below transformers on the GPU (not on the CPU): its attention implementation
    and the time its own tokenising of the same batches takes."""
    start = time.perf_counter()
    for i in range(0, len(texts), ST_BATCH):
        st.model.tokenize(texts[i:i + ST_BATCH])
    return {"sentence_transformers_tokenize_s": time.perf_counter() - start,
            "sentence_transformers_attention": st.model[0].auto_model.config._attn_implementation}


def written_vectors(output: Path, rows: int) -> np.ndarray:
    table = pq.read_table(output / "embeddings").sort_by("id")
    return table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(table), -1)[:rows]


def run(folder: Path, device: str, sizes, work: Path) -> dict:
    lengths = corpus_lengths(sizes.corpus_rows)
    texts = texts_of_lengths(folder, lengths, seed=5)
    corpus = write_corpus(texts, work / f"corpus-{folder.name}.parquet")
    index = run_index(corpus, folder, work / f"index-{folder.name}", device)
    print(f"  index: {index['embeddings_per_s']:,.0f} embeddings/s, {index['tokens_per_s']:,.0f} tokens/s "
          f"(job clock), GPU busy {index.get('gpu_busy_while_embedding', float('nan')):.0%}, "
          f"{index['wall_s']:.1f} s with start-up", flush=True)
    budget = 16384 if device.startswith("cuda") else CPU_BATCH_TOKENS
    model = read_model_folder(str(folder))
    sequences, _ = TextTokenizer(model.tokenizer_file, model.max_seq_length, model.prompt(None)).encode(texts)
    start = time.perf_counter()
    ours = engine_variants(folder, device, sequences, budget)
    print(f"  engine variants: {time.perf_counter() - start:.1f} s", flush=True)
    rows = min(sizes.peer_rows, len(texts))
    start = time.perf_counter()
    peer, peer_vectors, diagnostics = peers(folder, device, model.pooling, texts[:rows], sequences[:rows])
    print(f"  peer diagnostics: {diagnostics}", flush=True)
    print(f"  peers: {time.perf_counter() - start:.1f} s", flush=True)
    written = written_vectors(work / f"index-{folder.name}", rows)
    agreement = {name: min_cosine(written, vectors) for name, vectors in peer_vectors.items()}
    for name, cosine in agreement.items():
        if cosine < AGREEMENT:
            raise SystemExit(f"{folder}: the index's vectors disagree with {name} (min cosine {cosine:.5f})")
    return {"corpus": {"rows": len(texts), "tokens": int(sum(map(len, sequences))), "peer_rows": rows,
                       "median_tokens": float(np.median(list(map(len, sequences)))),
                       "max_tokens": int(max(map(len, sequences)))},
            "index": index, "engine": ours, "peers": peer, "peer_diagnostics": diagnostics, "agreement": agreement}
