"""One `index` run: prepare (guard the output's settings, list and shard the units, skip the done ones),
embed the pending units (one engine here, one process per device, or a Ray cluster), then finish
(rejected.parquet, the FAISS index when the whole job is done, metrics.json)."""
from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Protocol

from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.pipeline.config import ConfigError, JobConfig
from embedpipe.pipeline.index.plan import PreparedJob, expected_rows, job_tokenizer, prepare_job
from embedpipe.pipeline.index.reader import read_and_tokenize
from embedpipe.pipeline.index.report import EngineReport, process_age_s, run_metrics
from embedpipe.pipeline.index.runner import UnitRunner
from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.output.job_files import index_outputs, write_metrics, write_rejected_table
from embedpipe.pipeline.output.lock import LOCK_FILE, output_lock
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.text.tokenizer_pool import TokenizerPool
from embedpipe.pipeline.util.progress import Progress


@dataclass
class JobResult:
    metrics: dict
    exit_code: int  # 0: every unit of this run's share is done; 3: done but for skipped bad files


class Embedder(Protocol):
    """Embeds a prepared job's pending units into OUTPUT, as UnitRunner writes them; one report per engine."""

    def embed(self, prepared: PreparedJob, progress: Progress) -> list[EngineReport]: ...


OpenEmbedder = Callable[[JobConfig, TextTokenizer], ContextManager[Embedder]]


def run_job(job: JobConfig, open_embedder: OpenEmbedder | None = None) -> JobResult:
    """The whole job, holding OUTPUT's lock (raises OutputLocked when another run holds it).

    open_embedder(job, tokenizer): the engines, entered before any output is touched; LocalEngine by
    default (api.run_index picks the --devices engine processes or the Ray cluster instead)."""
    open_embedder = open_embedder or LocalEngine
    entered = time.perf_counter()
    startup = {"process_s": process_age_s()}  # where the time before the job clock goes (metrics.json)
    spec, tokenizer = job_tokenizer(job)
    # loads the engine, checks the devices or joins Ray: before any output
    with open_embedder(job, tokenizer) as embedder:
        startup["engine_s"] = time.perf_counter() - entered
        startup["warm_up_s"] = getattr(embedder, "warm_up_s", None)
        with new_output(job.output), output_lock(job.output, shard=job.shard):
            preparing = time.perf_counter()
            prepared = prepare_job(job, spec, tokenizer)
            total = expected_rows(prepared.mine) if job.chunking is None else None  # windows: known once cut
            with Progress(total, job.quiet, done_rows=rows_done(prepared)) as progress:
                startup["prepare_s"] = progress.start - preparing
                _log_start(progress, prepared, getattr(embedder, "attention", None))
                reports = embedder.embed(prepared, progress)
                startup["engine_start_in_pipeline_s"] = progress.start - progress.opened  # Ray starts its engines there
                return finish_job(prepared, reports, progress, progress.start - entered,
                                  getattr(embedder, "in_memory", None), startup)


@contextlib.contextmanager
def new_output(output: Path) -> Iterator[None]:
    """Creates OUTPUT when missing; when a check fails before anything is written (the job raises with
    OUTPUT holding only its lock files), a folder made here is removed again, so nothing is left."""
    created = not output.exists()
    output.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        if created and all(path.name.startswith(LOCK_FILE) for path in output.iterdir()):
            shutil.rmtree(output, ignore_errors=True)
        raise


class LocalEngine:
    """One engine in this process, fed by this process's tokenizer pool; a context manager.

    Entering starts the pool's workers and then loads the engine (the workers start meanwhile).
    """

    def __init__(self, job: JobConfig, tokenizer: TextTokenizer):
        self.job = job
        self.pool = TokenizerPool(tokenizer, job.num_workers)

    def __enter__(self) -> LocalEngine:
        self.pool.start()
        try:
            self.engine = load_engine(self.job.engine)
        except BaseException as error:
            self.pool.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.pool.__exit__(*exc)

    @property
    def warm_up_s(self) -> float | None:
        return self.engine.warm_up_s

    @property
    def attention(self) -> str | None:
        """The CUDA attention backend and why it was chosen (None on the CPU, which has one)."""
        return self.engine.attention if self.engine.device.type == "cuda" else None

    def embed(self, prepared: PreparedJob, progress: Progress) -> list[EngineReport]:
        keep_vectors = self.job.index_factory == "Flat" and not self.job.sharded  # this process builds it
        runner = UnitRunner(self.job, self.engine, progress, keep_vectors)
        runner.run(read_and_tokenize(self.job, self.pool, prepared.pending))
        # its workers exit while the job finishes (joining them, ~0.1 s of the job's clock on the H200,
        # waits until the pool's exit), and their memory is free for the index build
        self.pool.close(wait=False)
        self.in_memory = runner.in_memory
        return [runner.report()]


def load_engine(config: EngineConfig) -> Engine:
    """The job's engine, owning this process's torch threads (Engine.claim_host_threads) and warmed up
    before the job's clock starts (Engine.warm_up); every engine of an index job is loaded here."""
    try:
        engine = Engine(config)
    except ValueError as error:  # a setting the model cannot take (dim)
        raise ConfigError(str(error)) from error
    engine.claim_host_threads()
    engine.warm_up()
    return engine


def finish_job(prepared: PreparedJob, reports: list[EngineReport], progress: Progress, start_s: float = 0.0,
               in_memory: dict | None = None, startup: dict | None = None) -> JobResult:
    """Writes rejected.parquet, the index (once every unit of an unsharded job is done) and metrics.json.

    in_memory: the vectors of this run's unit files, as the in-process engine kept them (build_index).
    metrics' seconds is the job clock (embedding); start_s, before it (model, workers, listing), with
    startup splitting it (process_s: the process's life before run_job, its imports); finish_s, after
    it (this function: the index build, index_build_s, and the job's files)."""
    job, units, mine = prepared.job, prepared.units, prepared.mine
    metrics = run_metrics(reports, progress.seconds)
    if job.chunking is not None:  # rows are windows: of how many input rows
        metrics["input_rows"], metrics["chunks"] = sum(report.input_rows for report in reports), metrics["rows"]
    finishing = time.perf_counter()
    metrics["bad_files"] = ([{"path": p, "error": e} for p, e in prepared.bad_listing]
                            + [bad for report in reports for bad in report.bad_files])
    done = completed_units(job.output)
    missing = missing_units(mine, done, metrics["bad_files"])
    metrics["units"] = {"listed": len(units), "this_run": len(mine), "done": sum(u.unit_id in done for u in mine),
                        "shard": [job.shard_index, job.num_shards]}
    metrics["output_rows"] = sum(record["num_rows"] for record in done.values())
    metrics["output_rejected_rows"] = write_rejected_table(job.output)
    if not job.sharded and units and not missing:
        building = time.perf_counter()
        # index.json names the weights too, so `serve --index` takes the model by another path or id
        settings = {**prepared.settings, "model_fingerprint": prepared.spec.folder.fingerprint}
        meta = index_outputs([job.output], job.output, job.index_factory, settings, in_memory)
        metrics["index"] = {key: meta.get(key)
                            for key in ("factory", "metric", "num_rows", "dimension", "duplicate_ids")}
        metrics["index_build_s"] = time.perf_counter() - building
    metrics["start_s"], metrics["finish_s"] = start_s, time.perf_counter() - finishing
    if startup is not None:
        metrics["startup"] = startup
    write_metrics(job.output, metrics)
    progress.close()  # the bar's last state first, then the summary, as the last line
    progress.log(summary(metrics, job.output))
    check_all_ended(missing)
    return JobResult(metrics, 3 if metrics["bad_files"] else 0)


def missing_units(mine: list[WorkUnit], done: dict[str, dict], bad_files: list[dict]) -> list[str]:
    """This run's units that are neither done nor in a file skipped as bad."""
    bad_paths = {bad["path"] for bad in bad_files}
    return [unit.unit_id for unit in mine if unit.unit_id not in done and unit.path not in bad_paths]


def check_all_ended(missing: list[str]) -> None:
    if missing:  # every unit ends done or in a raised error
        raise RuntimeError(f"{len(missing)} units were not completed, with no error (first: {missing[0]})")


def rows_done(prepared: PreparedJob) -> int:
    """Input rows of this run's units done before it (embedded or rejected), where the bar starts."""
    mine = {unit.unit_id for unit in prepared.mine}
    return sum(r["num_rows"] + r["num_rejected"] for unit_id, r in prepared.done_before.items() if unit_id in mine)


def _log_start(progress: Progress, prepared: PreparedJob, attention: str | None = None) -> None:
    job, units, mine, pending = prepared.job, prepared.units, prepared.mine, prepared.pending
    if attention is not None:
        progress.log(f"attention: {attention}")
    share = f" (shard {job.shard_index} of {job.num_shards}: {len(mine)})" if job.sharded else ""
    progress.log(f"{len(units)} units{share}, {len(mine) - len(pending)} already done, {len(pending)} to do")
    changes = prepared.changes
    if changes.changed or changes.relisted:
        first = (changes.changed + changes.relisted)[0]["unit_id"]
        progress.log(f"{len(changes.changed) + len(changes.relisted)} done units were dropped to be redone: their "
                     f"input changed since they were embedded (e.g. {first!r})")
    if changes.damaged:
        progress.log(f"warning: {len(changes.damaged)} done units were dropped to be redone: {changes.damaged[0][1]}")
    if changes.removed:
        what = "dropped (--prune)" if changes.pruned else "kept, in the index too (--prune drops them)"
        progress.log(f"{'' if changes.pruned else 'warning: '}{len(changes.removed)} done units are from files no "
                     f"longer among the inputs (e.g. {changes.removed[0]['path']!r}): {what}")


def summary(metrics: dict, output: Path) -> str:
    rows = f"{metrics['input_rows']:,} rows as {metrics['chunks']:,} windows" if "chunks" in metrics \
        else f"{metrics['rows']:,} rows"
    line = (f"embedded {rows} ({metrics['rejected_rows']:,} rejected, "
            f"{metrics['truncated_texts']:,} truncated) in {metrics['seconds']:.1f} s: "
            f"{metrics['tokens_per_s']:,.0f} tokens/s, {metrics['embeddings_per_s']:,.1f} embeddings/s, "
            f"padding {100 * metrics['padding_waste']:.1f}%")
    if "index" in metrics:
        line += f"; index of {metrics['index']['num_rows']:,} rows at {output / 'index.faiss'}"
    if metrics.get("index", {}).get("duplicate_ids"):
        line += f"; warning: {metrics['index']['duplicate_ids']:,} ids occur more than once (each row is kept)"
    if metrics["bad_files"]:
        line += f"; skipped {len(metrics['bad_files'])} bad files (listed in {output / 'metrics.json'})"
    return line


