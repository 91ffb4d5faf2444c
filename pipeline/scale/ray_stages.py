"""The two stages of the Ray pipeline (ray_job.py), run on the cluster's workers.

tokenize_unit runs as a Ray task per unit (CPU only; importing this module does not import torch);
EngineActor holds one engine and one UnitStream (index/unit_stream.py): every unit it is handed joins
the same running batcher, so batches span units and the engine runs the next unit's batches while the
last one is written, as in a local run (same UnitRunner, unit writer and manifest record). A call
returns once its unit is committed; Ray keeps two calls in flight per actor, so the next unit is queued
by then. A unit travels between the stages as one row: its chunks (the same reader.ReadAndTokenize
tasks a local job's tokenizer workers run), pickled: token ids, ids and kept columns of any Arrow type,
rejected rows, read errors.
"""
from __future__ import annotations

import asyncio
import os
import pickle
from dataclasses import replace

from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.index.reader import unit_tasks
from embedpipe.pipeline.inputs.sources import InputError, WorkUnit
from embedpipe.pipeline.text.tokenizer import TextTokenizer


def tokenize_unit(row: dict, job: JobConfig, tokenizer: TextTokenizer) -> dict:
    """{unit_id, chunks}: the unit's chunks, as the runner takes them, pickled.

    A read error travels as a piece's end marker, as in a local run, so the engine side decides
    (fail the job, or skip the file under --skip-bad-files)."""
    unit = WorkUnit(**row)
    chunks = [chunk for task in unit_tasks(job, [unit]) for chunk in task.run(tokenizer)]
    return {"unit_id": unit.unit_id, "chunks": pickle.dumps(chunks)}


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
    """One engine (a GPU Ray assigned, or the CPU) and its UnitStream; each call embeds and writes one unit.

    Yields per unit {engine, report, error}: the pickled EngineReport of the unit, or the pickled input
    error that stops the job (the driver raises it, so the exit code is a local run's). An async
    generator: Ray runs the calls in flight on one event loop, so two can wait on the stream at once.
    """

    def __init__(self, job: JobConfig, device: str):
        import ray
        import torch

        from embedpipe.pipeline.index.job import load_engine
        from embedpipe.pipeline.index.unit_stream import UnitStream

        if device == "cpu":
            torch.set_num_threads(1)  # the one CPU this actor reserved
        engine = load_engine(replace(job.engine, device=device))
        node = ray.util.get_node_ip_address()
        gpus = ray.get_gpu_ids()
        self.label = f"cuda:{gpus[0]} on {node}" if device == "cuda" else f"cpu on {node} (pid {os.getpid()})"
        self.stream = UnitStream(job, engine, self.label)

    async def __call__(self, batch: dict):
        (unit_id,), (chunks,) = batch["unit_id"], batch["chunks"]  # batch_size=1: one unit per call
        try:
            report = await asyncio.wrap_future(self.stream.submit(str(unit_id), pickle.loads(chunks)))
        except InputError as error:
            yield {"engine": [self.label], "report": [b""], "error": [pickle.dumps(error)]}
            return
        yield {"engine": [self.label], "report": [pickle.dumps(report)], "error": [b""]}
