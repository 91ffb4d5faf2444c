"""`index --ray`: the engines run on a Ray cluster, fed by a Ray Data pipeline of the pending units.

    pending units   ray.data.from_items, one block per unit
      -> map_batches  embed and write it: an actor pool of engines, one GPU each (or cpu:N actors),
                      one unit per call, two calls in flight per actor feeding one running batcher;
                      each engine has its own tokenizer actors, sharing the CPUs the engines leave, that
                      read and tokenize the unit's pieces as a local job's workers do (ray_stages.py);
                      the unit file and its manifest record as a local run writes them
      -> iter_rows    one report per unit back to the driver: progress, metrics, errors

The driver prepares and finishes the job as every other path does (index/job.py), so the output layout,
resume (only pending units enter the pipeline) and the index are the same. Every node must see the
inputs, the model folder and OUTPUT at the same paths: a shared filesystem.
"""
from __future__ import annotations

import logging
import pickle
import time
from contextlib import contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Iterator

from embedpipe.pipeline.config import ConfigError, DeviceSpec, JobConfig
from embedpipe.pipeline.util.progress import Progress
from embedpipe.pipeline.scale.ray_stages import TOKENIZE_ENV, EngineActor, tokenize_and_write
from embedpipe.pipeline.index.report import EngineReport
from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.index.unit_files import RunCounts

if TYPE_CHECKING:
    from embedpipe.pipeline.index.plan import PreparedJob

@contextmanager
def ray_engines(job: JobConfig) -> Iterator[RayEngines]:
    """The engines of the cluster at job.ray_address (or of the Ray session this process already has)."""
    with ray_session(job):
        import ray
        yield RayEngines(job, *engine_pool(job.devices, ray.cluster_resources()))


@contextmanager
def ray_session(job: JobConfig) -> Iterator[None]:
    """Joins the cluster at job.ray_address unless this process already has a Ray session; leaves what it joined."""
    try:
        import ray
    except ImportError as error:
        raise ConfigError("--ray needs Ray Data: pip install 'embedpipe[ray]'") from error
    joined = not ray.is_initialized()
    if joined:
        try:
            ray.init(address=job.ray_address, logging_level=logging.WARNING if job.quiet else logging.INFO,
                     log_to_driver=not job.quiet)
        except ConnectionError as error:  # no cluster at that address
            raise ConfigError(f"--ray {job.ray_address}: {error}") from error
    try:
        yield
    finally:
        if joined:
            ray.shutdown()


def engine_pool(spec: DeviceSpec, resources: dict) -> tuple[int, str]:
    """(number of engine actors, their device) for --devices on a cluster of these resources."""
    if spec.kind == "cpu":
        if spec.count >= resources.get("CPU", 0):  # the actors hold their CPUs: tokenizing needs one more
            raise ConfigError(f"devices cpu:{spec.count} needs more than {spec.count} CPUs in the Ray cluster, "
                              f"which has {resources.get('CPU', 0):g}")
        return spec.count, "cpu"
    gpus = int(resources.get("GPU", 0))
    if not gpus:
        raise ConfigError("the Ray cluster has no GPUs; --devices cpu:N runs N engines on CPUs")
    if spec.count is not None and spec.count > gpus:
        raise ConfigError(f"devices gpu:{spec.count}: the Ray cluster has {gpus} GPUs")
    return spec.count or gpus, "cuda"


class RayEngines:
    """The Embedder of `--ray`: see the module docstring."""

    def __init__(self, job: JobConfig, num_engines: int, device: str):
        self.job, self.num_engines, self.device = job, num_engines, device

    def embed(self, prepared: PreparedJob, progress: Progress) -> list[EngineReport]:
        if not prepared.pending:
            return []
        import ray.data

        if self.job.quiet:
            ray.data.DataContext.get_current().enable_progress_bars = False
        # the CPUs the engine actors (one each) leave, shared out among their tokenizer actors
        tokenizer_cpus = max(0.0, ray.cluster_resources().get("CPU", 0) - self.num_engines) / self.num_engines
        units = ray.data.from_items([{"unit": pickle.dumps(unit)} for unit in prepared.pending],
                                    override_num_blocks=len(prepared.pending))
        written = units.map_batches(
            EngineActor, fn_constructor_kwargs={"job": self.job, "device": self.device,
                                                "tokenizer": prepared.tokenizer, "tokenizer_cpus": tokenizer_cpus},
            batch_size=1, num_cpus=1, num_gpus=1 if self.device == "cuda" else 0, **engine_actors(self.num_engines))
        progress.log(f"{self.num_engines} engines on Ray ({self.device})")
        return self._collect(written, progress)

    def _collect(self, written, progress: Progress) -> list[EngineReport]:
        """Sums the unit reports per engine; raises the first unit's input error (the pipeline stops). The job
        clock starts once the first engine actor was ready: Ray Data starts them inside the pipeline, after the
        clock, where --devices loads its engines before it (7 s of a 46 s job on the H200, BERT-base)."""
        reports: dict[str, EngineReport] = {}
        first_ready = [float("inf")]

        def clock_from_ready(row: dict) -> None:  # ready_at: time.time() on the actor's node (NTP-close to ours)
            now = time.perf_counter()
            ready = min(now, now - (time.time() - row["ready_at"]))  # a node's clock ahead of ours: not in the future
            if ready < first_ready[0]:
                first_ready[0] = ready
                progress.start_clock_at(ready)

        for report in unit_reports(written, "report", progress, clock_from_ready):
            reports[report.device] = reports[report.device] + report if report.device in reports else report
        return list(reports.values())


def engine_actors(size: int) -> dict:
    """map_batches' settings for `size` engine actors, each running two calls at once: the next unit waits
    in the actor's stream while one is written. Newer Ray (2.60) names that setting in ActorPoolStrategy
    (max_concurrent_calls_per_actor); older Ray takes it as the actor's max_concurrency, a remote argument."""
    import inspect

    import ray.data

    calls = 2
    if "max_concurrent_calls_per_actor" in inspect.signature(ray.data.ActorPoolStrategy).parameters:
        return {"compute": ray.data.ActorPoolStrategy(size=size, max_concurrent_calls_per_actor=calls)}
    return {"compute": ray.data.ActorPoolStrategy(size=size), "max_concurrency": calls}


def unit_reports(written, column: str, progress: Progress, on_row=lambda row: None) -> Iterator:
    """The pickled per-unit reports (EngineReport, RunCounts) in `column` of a pipeline's rows, as they come,
    with the progress they make (on_row(row) first); raises the first unit's input error (the pipeline stops)."""
    for row in written.iter_rows():
        if row["error"]:
            raise pickle.loads(row["error"])
        on_row(row)
        report = pickle.loads(row[column])
        progress.advance(rows=report.rows + report.rejected, tokens=report.tokens)
        for bad in report.bad_files:
            progress.log(f"skipping a bad file: {bad['error']}")
        yield report


def tokenize_with_ray(job: JobConfig, tokenizer: TextTokenizer, units: list[WorkUnit], progress: Progress) -> RunCounts:
    """`tokenize --ray`: one Ray task per pending unit reads, tokenizes and writes it (ray_stages)."""
    counts = RunCounts()
    if not units:
        return counts
    with ray_session(job):
        import ray.data

        if job.quiet:
            ray.data.DataContext.get_current().enable_progress_bars = False
        items = ray.data.from_items([asdict(unit) for unit in units], override_num_blocks=len(units))
        written = items.map(tokenize_and_write, fn_kwargs={"job": job, "tokenizer": tokenizer}, num_cpus=1,
                            runtime_env=TOKENIZE_ENV)
        for unit_counts in unit_reports(written, "counts", progress):
            for name in ("units", "rows", "tokens", "rejected", "truncated"):
                setattr(counts, name, getattr(counts, name) + getattr(unit_counts, name))
            counts.bad_files += unit_counts.bad_files
    return counts
