"""The actors of the Ray pipeline (ray_job.py), run on the cluster's workers.

TokenizerActor reads and tokenizes pieces of units (reader.ReadAndTokenize, the task a local job's
tokenizer workers run; CPU only: importing this module does not import torch). EngineActor holds one
engine and one UnitStream (index/unit_stream.py); each call takes one unit: it hands the unit's pieces
to the tokenizer actors at once and streams their chunks, in order, into the running batcher as they
come, so the engine starts on a unit after one piece is tokenized, not the whole unit. Batches span
units and the engine runs the next unit's batches while the last one is written, as in a local run
(the same UnitRunner, unit writer and manifest record). A call returns once its unit is committed; Ray
keeps two calls in flight per actor, so the next unit is queued by then. Chunks travel pickled: token
ids, ids and kept columns of any Arrow type, rejected rows, read errors.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import time
from dataclasses import replace
from typing import Iterator

from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.index.reader import Chunk, Piece, piece_task, pieces_of, unit_tasks
from embedpipe.pipeline.inputs.sources import InputError, WorkUnit
from embedpipe.pipeline.text.tokenizer import TextTokenizer


# tokenizer actors and tasks use one core each: they are the parallelism, not the tokenizer's threads
TOKENIZE_ENV = {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
READY_TIMEOUT_S = 60.0  # tokenizer actors not started by then (no CPU free for them) are given up
TOKENIZER_RETRIES = 3  # restarts of a tokenizer actor that died, and retries of its piece


class TokenizerActor:
    """One CPU (or a share of one) reading and tokenizing the pieces its engine actor hands it, in the order
    they come."""

    def __init__(self, job: JobConfig, tokenizer: TextTokenizer):
        self.job, self.tokenizer = job, tokenizer

    def ready(self) -> None:
        """Answers once the actor runs."""

    def tokenize(self, piece: Piece) -> bytes:
        """The piece's chunks, pickled: a read error travels as its end marker, as in a local run, so the
        engine side decides (fail the job, or skip the file under --skip-bad-files)."""
        return pickle.dumps(list(piece_task(self.job, piece).run(self.tokenizer)))


def tokenize_and_write(row: dict, job: JobConfig, tokenizer: TextTokenizer) -> dict:
    """`tokenize --ray`'s task: one unit read, tokenized and written as a local tokenize job writes it.

    Returns {unit_id, counts, error}: the pickled RunCounts, or the pickled input error that stops the job."""
    from embedpipe.pipeline.util.progress import Progress
    from embedpipe.pipeline.index.token_files import TokenFilesRunner

    unit = WorkUnit(**row)
    runner = TokenFilesRunner(job, tokenizer, Progress(None, quiet=True))
    try:
        runner.run(chunk for task in unit_tasks(job, [unit]) for chunk in task.run(tokenizer))
    except InputError as error:
        return {"unit_id": unit.unit_id, "counts": b"", "error": pickle.dumps(error)}
    return {"unit_id": unit.unit_id, "counts": pickle.dumps(runner.counts), "error": b""}


class EngineActor:
    """One engine (a GPU Ray assigned, or the CPU), its UnitStream and its tokenizer actors (tokenizer_cpus
    CPUs, shared out: tokenizer_split; they end with it); each call embeds and writes one unit.

    Yields per unit {engine, report, error, ready_at}: the pickled EngineReport of the unit, or the pickled input
    error that stops the job (the driver raises it, so the exit code is a local run's), and when the actor was
    ready (time.time(): the driver starts the job clock at the first actor's). An async
    generator: Ray runs the calls in flight on one event loop, so two can wait on the stream at once.
    """

    def __init__(self, job: JobConfig, device: str, tokenizer: TextTokenizer, tokenizer_cpus: float):
        import ray
        import torch

        from embedpipe.pipeline.index.job import load_engine
        from embedpipe.pipeline.index.unit_stream import UnitStream

        if device == "cpu":
            torch.set_num_threads(1)  # the one CPU this actor reserved
        tokenizers = start_tokenizers(job, tokenizer, tokenizer_cpus)  # they start while the engine loads
        engine = load_engine(replace(job.engine, device=device))
        node = ray.util.get_node_ip_address()
        gpus = ray.get_gpu_ids()
        self.label = f"cuda:{gpus[0]} on {node}" if device == "cuda" else f"cpu on {node} (pid {os.getpid()})"
        self.job, self.stream = job, UnitStream(job, engine, self.label)
        self.tokenizers = started(tokenizers)
        self.next_tokenizer = itertools.cycle(self.tokenizers)  # a unit's pieces go to them in turn
        self.ready_at = time.time()  # engine loaded and warm, tokenizers running (the driver's job clock)

    async def __call__(self, batch: dict):
        (unit,) = map(pickle.loads, batch["unit"])  # batch_size=1: one unit per call
        pieces = [next(self.next_tokenizer).tokenize.remote(piece)
                  for piece in pieces_of(unit, self.job.read_rows, len(self.tokenizers))]
        try:
            report = await asyncio.wrap_future(self.stream.submit(unit.unit_id, piece_chunks(pieces)))
        except InputError as error:
            yield {"engine": [self.label], "report": [b""], "error": [pickle.dumps(error)],
                   "ready_at": [self.ready_at]}
            return
        yield {"engine": [self.label], "report": [pickle.dumps(report)], "error": [b""], "ready_at": [self.ready_at]}


def piece_chunks(pieces: list) -> Iterator[Chunk]:
    """The chunks of the pieces (ObjectRefs of TokenizerActor.tokenize), in order, each once it is tokenized
    (in the stream's thread: waiting here leaves the engine's queued batches running)."""
    import ray

    for piece in pieces:
        yield from pickle.loads(ray.get(piece))


def tokenizer_split(cpus: float) -> tuple[int, float]:
    """(tokenizer actors, CPUs each) sharing `cpus` CPUs: one per whole CPU, at least one (on a fraction of
    a CPU, or on none when the engines hold them all)."""
    count = max(1, int(cpus))
    return count, cpus / count


def start_tokenizers(job: JobConfig, tokenizer: TextTokenizer, cpus: float) -> list:
    """The TokenizerActors of one engine, sharing `cpus` CPUs (tokenizer_split)."""
    import ray

    count, each = tokenizer_split(cpus)
    # a tokenizer that dies (say, killed for memory) is restarted and its piece tokenized again (it is pure)
    actor = ray.remote(num_cpus=each, runtime_env=TOKENIZE_ENV, max_restarts=TOKENIZER_RETRIES,
                       max_task_retries=TOKENIZER_RETRIES)(TokenizerActor)
    job_ref, tokenizer_ref = ray.put(job), ray.put(tokenizer)  # once, not once per actor
    return [actor.remote(job_ref, tokenizer_ref) for _ in range(count)]


def started(tokenizers: list) -> list:
    """The tokenizer actors that run within READY_TIMEOUT_S; the others are stopped (the cluster had no CPU
    for them). Raises RuntimeError when none runs."""
    import ray

    answers = {actor.ready.remote(): actor for actor in tokenizers}
    ready, late = ray.wait(list(answers), num_returns=len(answers), timeout=READY_TIMEOUT_S)
    for answer in late:
        ray.kill(answers[answer])
    if not ready:
        raise RuntimeError(f"no tokenizer actor started within {READY_TIMEOUT_S:.0f} s: "
                           "the Ray cluster has no CPU free")
    ray.get(ready)  # raises a constructor's error
    return [answers[answer] for answer in ready]
