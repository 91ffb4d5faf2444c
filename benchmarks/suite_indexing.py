"""Suite 5, offline indexing end to end: Parquet in, Parquet + FAISS out, on a corpus of realistic lengths.

Two systems, each a fresh process per round, alternating (A B A B A B) on the same Parquet file, the GPU warmed
(clocks recorded) before each: `embedpipe index` as a user runs it (reading, tokenising in workers, embedding,
writing, the Flat index), and the script a user would otherwise write (st_index.py: pyarrow, SentenceTransformer
in bf16, `encode(texts, batch_size=256)`, Parquet, FAISS IndexFlatIP), which then also encodes the first
`default_batch_rows` texts at sentence-transformers' default batch of 32. Each is timed whole (wall: process
start to exit, imports included) and by its own clock: ours by the job's (metrics.json: read, tokenise, embed,
write, index), the script's `encode` alone (its tokenising and embedding, no I/O). While each runs, its RSS and
the GPU's busy fraction (nvidia-smi) are sampled. The vectors both wrote are compared (cosine >= 0.999).

A round of a 0.6B shape on 200,000 rows takes ~4.5 min, most of it the script's encode, so 3 rounds do not fit
one 10-minute device call: with --add-rounds a call's rounds are added to those an earlier call made on the same
machine, in the same boot of it (common.machine_id), on the same corpus; anything else starts the rounds afresh.
Every ratio still pairs a round of ours with the peer's round that ran next to it.
"""
from __future__ import annotations

import hashlib
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

from common import machine_id, min_cosine, run_process, synchronize, tree_rss
from isolation import OutOfBudget, ratio, round_robin, same_process_check, summarize, warm
from workloads import corpus_lengths, texts_of_lengths, write_corpus

SAMPLE_S = 0.1
AGREEMENT = 0.999
CHECK_ROWS = 2000  # rows whose vectors are compared
ST_INDEX = Path(__file__).resolve().parent / "st_index.py"
SYSTEMS = ("embedpipe index", "sentence-transformers")
SUMMARIES = {SYSTEMS[0]: SYSTEMS[0], SYSTEMS[1]: "sentence-transformers (batch 256)"}  # system: its summary's name


class Sampler:
    """Samples a process tree's RSS and the utilisation of GPUs 0 .. gpus - 1 (none: 0), in threads."""

    def __init__(self, pid: int, gpus: int):
        self.process, self.rss, self.busy = psutil.Process(pid), [], [[] for _ in range(gpus)]
        query = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
                 f"-lms={int(SAMPLE_S * 1000)}", "-i", ",".join(map(str, range(gpus)))]
        self.nvidia = subprocess.Popen(query, stdout=subprocess.PIPE, text=True,
                                       stderr=subprocess.DEVNULL) if gpus else None
        self.threads = [threading.Thread(target=self._rss, daemon=True)]
        if self.nvidia is not None:
            self.threads.append(threading.Thread(target=self._gpu, daemon=True))
        for thread in self.threads:
            thread.start()

    @classmethod
    def of_run(cls, pid: int, device: str) -> Sampler:
        """The sampler of a run on `device`: GPU 0's utilisation too on CUDA."""
        return cls(pid, 1 if device.startswith("cuda") else 0)

    def _rss(self) -> None:
        while (rss := tree_rss(self.process)) is not None:
            self.rss.append(sum(rss))
            time.sleep(SAMPLE_S)

    def _gpu(self) -> None:
        for line in self.nvidia.stdout:
            sample = utilisation_sample(line, len(self.busy))
            if sample is not None:
                self.busy[sample[0]].append(sample[1])

    def stop(self) -> dict:
        if self.nvidia is not None:
            self.nvidia.terminate()
        for thread in self.threads:
            thread.join(5)
        return {"peak_rss_mib": max(self.rss, default=0) / 2**20, **busy_figures(self.busy)}


def utilisation_sample(line: str, gpus: int) -> tuple[int, float] | None:
    """(GPU index, busy fraction) of one line of `nvidia-smi --query-gpu=index,utilization.gpu`, None for another
    line (a header, [N/A]) or a GPU past the first `gpus`."""
    index, _, percent = (part.strip() for part in line.partition(","))
    if not (index.isdigit() and percent.isdigit() and int(index) < gpus):
        return None
    return int(index), int(percent) / 100


def busy_figures(busy: list[list[float]]) -> dict:
    """Per GPU, its busy fractions over a run -> the mean while embedding (a GPU's first to last busy sample) and
    over the whole process, averaged over the GPUs, and with several GPUs each GPU's own while embedding."""
    if not any(busy):
        return {}
    while_embedding, whole = [], []
    for samples in busy:
        active = np.nonzero(samples)[0]
        window = samples[active[0]:active[-1] + 1] if len(active) else []
        while_embedding.append(float(np.mean(window)) if window else 0.0)
        whole.append(float(np.mean(samples)) if samples else 0.0)
    figures = {"gpu_busy_while_embedding": float(np.mean(while_embedding)),
               "gpu_busy_whole_process": float(np.mean(whole))}
    if len(busy) > 1:
        figures["gpu_busy_per_device"] = while_embedding
    return figures


def run_sampled(command: list[str], device: str, timeout: float | None = None) -> dict:
    """Runs `command` in a fresh process, sampled; its wall seconds, pid and samples. Killed past `timeout` (with
    its workers: common.run_process)."""
    start = time.perf_counter()
    code, _, stderr, (sampler,) = run_process(command, timeout, lambda pid: (Sampler.of_run(pid, device),))
    wall_s = time.perf_counter() - start
    samples = sampler.stop()
    if code is None:
        raise OutOfBudget(f"{Path(command[1]).name} {command[2:4]} ran past the run's budget and was stopped")
    if code != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({code}):\n{stderr[-4000:]}")
    return {"wall_s": wall_s, "pid": sampler.process.pid, **samples}


def run_index(corpus: Path, folder: Path, output: Path, device: str, options: tuple[str, ...] = (),
              timeout: float | None = None) -> dict:
    """`embedpipe index` with `options` in a fresh process, sampled; its figures from metrics.json."""
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus), "--output", str(output),
               "--model", str(folder), "--device", device, "--quiet", *options]
    run = run_sampled(command, device, timeout)
    metrics = json.loads((output / "metrics.json").read_text())
    return {**run, "job_s": metrics["seconds"], "rows": metrics["rows"], "tokens": metrics["tokens"],
            "embeddings_per_s": metrics["embeddings_per_s"], "tokens_per_s": metrics["tokens_per_s"],
            "padding_waste": metrics["padding_waste"], "index_rows": metrics["index"]["num_rows"]}


def run_user_script(corpus: Path, folder: Path, output: Path, device: str, default_batch_rows: int,
                    timeout: float | None = None) -> dict:
    """st_index.py in a fresh process, sampled: its wall, its phases, its encode's rates at batch 256 and 32."""
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, str(ST_INDEX), str(corpus), str(folder), str(output), "--device", device,
               "--batch-size", "256", "--default-batch-rows", str(default_batch_rows)]
    run = run_sampled(command, device, timeout)
    times = json.loads((output / "timings.json").read_text())
    return {**run, **times, "embeddings_per_s": times["rows"] / times["encode_s"]}


def stream(engine, batches: list, in_flight: int) -> float:
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


def corpus_file(folder: Path, rows: int, work: Path) -> Path:
    """The corpus of `rows` texts (log-normal lengths, median 64 tokens, 20-512), one per tokenizer: the first rows
    of a larger one already written (the same draws), else written."""
    tokenizer = hashlib.sha1((folder / "tokenizer.json").read_bytes()).hexdigest()[:8]
    path = work / f"corpus-{tokenizer}-{rows}.parquet"
    larger = sorted(work.glob(f"corpus-{tokenizer}-*.parquet"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    larger = [p for p in larger if int(p.stem.rsplit("-", 1)[1]) >= rows]
    if not path.exists() and larger:
        pq.write_table(pq.read_table(larger[0]).slice(0, rows), path, row_group_size=4096)
    elif not path.exists():
        start = time.perf_counter()
        write_corpus(texts_of_lengths(folder, corpus_lengths(rows), seed=5), path)
        print(f"  corpus of {rows:,} rows written in {time.perf_counter() - start:.1f} s", flush=True)
    return path


def vectors_by_id(path: Path, rows: int) -> np.ndarray:
    """The first `rows` vectors by id of an embeddings Parquet file or folder."""
    table = pq.read_table(path, columns=["id", "embedding"]).sort_by("id").slice(0, rows)
    return table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(table), -1)


class IndexingRun:
    """Writes the corpus on a thread while the other suites' processes load (`ready()` waits for it); each
    round's processes are timed from their start."""

    def __init__(self, ctx):
        self.ctx, self.rows = ctx, ctx.sizes.rows_for(ctx.name)
        self.default_rows = min(ctx.sizes.default_batch_rows_for(ctx.name), self.rows)
        self.corpus, self.failure = None, None
        self.thread = threading.Thread(target=self.write_corpus, daemon=True)
        self.thread.start()

    def write_corpus(self) -> None:
        try:
            self.corpus = corpus_file(self.ctx.folder, self.rows, self.ctx.work)
        except BaseException as error:  # re-raised by ready()
            self.failure = error

    def ready(self) -> None:
        self.thread.join()
        if self.failure is not None:
            raise self.failure

    def stop(self) -> None:
        self.thread.join()

    def measure(self) -> dict:
        ctx, sizes = self.ctx, self.ctx.sizes
        rounds, cut = round_robin(list(SYSTEMS), sizes.rounds, self.run_one, ctx.deadline, "indexing")
        same_process_check({system: [r["pid"] for r in rounds[system]] for system in SYSTEMS})
        agreement, per_call = self.agreement(self.rows), [len(rounds[SYSTEMS[0]])]
        if earlier := self.earlier_rounds(rounds[SYSTEMS[0]][0]["tokens"]):
            rounds = {system: earlier["systems"][SUMMARIES[system]]["rounds"] + rounds[system] for system in SYSTEMS}
            per_call = earlier["rounds_per_call"] + per_call
            agreement["sentence-transformers"] = min(agreement["sentence-transformers"],
                                                     earlier["agreement"]["sentence-transformers"])
            cut = cut and f"the last of {len(per_call)} calls: {cut}"
        out = {**self.summary(rounds, self.rows), "agreement": agreement, "machine": machine_id(),
               "rounds_per_call": per_call}
        if cut:
            out["rounds_cut"] = cut
        shutil.rmtree(ctx.work / f"index-{ctx.name}", ignore_errors=True)
        return out

    def earlier_rounds(self, tokens: int) -> dict | None:
        """The earlier call's suite 5 (--add-rounds) if its rounds can be added to this call's: the same machine
        and boot, the same corpus, the same rows at batch 32."""
        earlier = self.ctx.earlier
        if not earlier:
            return None
        if "machine" not in earlier:
            print("  the earlier rounds recorded no machine: this call's replace them", flush=True)
            return None
        corpus = earlier["corpus"]
        same = {"machine": (earlier["machine"], machine_id()),
                "corpus": ((corpus["file"], corpus["tokens"]), (self.corpus.name, tokens)),
                "batch-32 rows": (corpus.get("default_batch_rows"), self.default_rows)}
        if differs := [what for what, (then, now) in same.items() if then != now]:
            print(f"  the earlier rounds had another {' and '.join(differs)}: this call's replace them", flush=True)
            return None
        return earlier

    def output(self, system: str, r: int) -> Path:
        return self.ctx.work / f"index-{self.ctx.name}" / f"{'ours' if system == SYSTEMS[0] else 'st'}-{r}"

    def run_one(self, system: str, r: int) -> dict:
        ctx = self.ctx
        clocks = warm(ctx.device)
        if system == SYSTEMS[0]:
            result = run_index(self.corpus, ctx.folder, self.output(system, r), ctx.device,
                               timeout=ctx.deadline.timeout())
        else:
            result = run_user_script(self.corpus, ctx.folder, self.output(system, r), ctx.device, self.default_rows,
                                     ctx.deadline.timeout())
        result["wall_embeddings_per_s"] = result["rows"] / result["wall_s"]
        print(f"  round {r} {system:22s} {result['embeddings_per_s']:10,.0f} embeddings/s (own clock), "
              f"{result['wall_embeddings_per_s']:8,.0f} with start-up ({result['wall_s']:.1f} s)", flush=True)
        if r:  # round 0's vectors are compared at the end
            shutil.rmtree(self.output(system, r), ignore_errors=True)
        return {**result, "clocks_before": clocks}

    def summary(self, rounds: dict, rows: int) -> dict:
        """Each system's rounds summarised; batch 32 as a system of its own; ours vs each, round by round."""
        ours, st = rounds[SYSTEMS[0]], rounds[SYSTEMS[1]]
        st32 = [{"embeddings_per_s": r["default_batch_rows"] / r["default_batch_encode_s"],
                 "encode_s": r["default_batch_encode_s"], "rows": r["default_batch_rows"]} for r in st]
        pids = {SYSTEMS[0]: [r["pid"] for r in ours], SYSTEMS[1]: [r["pid"] for r in st]}
        return {"corpus": {"rows": rows, "tokens": ours[0]["tokens"], "file": self.corpus.name,
                           "median_tokens": float(np.median(corpus_lengths(rows))),
                           "default_batch_rows": self.default_rows},
                "rounds": len(ours), "pids": pids,
                "systems": {SYSTEMS[0]: summarize(ours), SUMMARIES[SYSTEMS[1]]: summarize(st),
                            "sentence-transformers (batch 32)": summarize(st32)},
                "vs": {"sentence-transformers (batch 256)": {
                           "wall": ratio(ours, st, "wall_embeddings_per_s", True),
                           "own_clock": ratio(ours, st, "embeddings_per_s", True)},
                       "sentence-transformers (batch 32)": {"own_clock": ratio(ours, st32, "embeddings_per_s", True)}}}

    def agreement(self, rows: int) -> dict:
        """Min cosine of the first rows' vectors as round 0's processes wrote them."""
        check = min(CHECK_ROWS, rows)
        ours = vectors_by_id(self.output(SYSTEMS[0], 0) / "embeddings", check)
        st = vectors_by_id(self.output(SYSTEMS[1], 0) / "embeddings.parquet", check)
        cosine = min_cosine(ours, st)
        if cosine < AGREEMENT:
            raise SystemExit(f"the index's vectors disagree with sentence-transformers' (min cosine {cosine:.5f})")
        return {"sentence-transformers": cosine, "rows": check}
