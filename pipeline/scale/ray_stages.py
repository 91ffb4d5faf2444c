"""The two stages of the Ray pipeline (ray_job.py), run on the cluster's workers.

tokenize_unit runs as a Ray task per unit (CPU only; importing this module does not import torch);
EngineActor holds one engine and embeds and writes one unit per call with the same UnitRunner, unit
writer and manifest record as every other path. A unit travels between them as one row: its chunks
(the same reader.ReadAndTokenize tasks a local job's tokenizer workers run), pickled: token ids,
ids and kept columns of any Arrow type, rejected rows, read errors.
"""
from __future__ import annotations

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
    """One engine (a GPU Ray assigned, or the CPU); embeds and writes one unit per call.

    Returns per unit {engine, report, error}: the pickled EngineReport of the unit, or the pickled
    input error that stops the job (the driver raises it, so the exit code is a local run's).
    """

    def __init__(self, job: JobConfig, device: str):
        import ray
        import torch

        from embedpipe.pipeline.index.job import load_engine

        if device == "cpu":
            torch.set_num_threads(1)  # the one CPU this actor reserved
        self.job, self.engine = job, load_engine(replace(job.engine, device=device))
        node = ray.util.get_node_ip_address()
        gpus = ray.get_gpu_ids()
        self.label = f"cuda:{gpus[0]} on {node}" if device == "cuda" else f"cpu on {node} (pid {os.getpid()})"

    def __call__(self, batch: dict) -> dict:
        from embedpipe.pipeline.util.progress import Progress
        from embedpipe.pipeline.index.runner import UnitRunner

        (chunks,) = batch["chunks"]  # batch_size=1: one unit per call
        graphs_before = self.engine.counters.as_dict()
        runner = UnitRunner(self.job, self.engine, Progress(None, quiet=True))
        try:
            runner.run(pickle.loads(chunks))
        except InputError as error:
            return {"engine": [self.label], "report": [b""], "error": [pickle.dumps(error)]}
        report = runner.report()
        report.device = self.label
        report.graphs = {key: count - graphs_before[key] for key, count in report.graphs.items()}
        return {"engine": [self.label], "report": [pickle.dumps(report)], "error": [b""]}
