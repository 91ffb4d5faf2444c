"""One `index` run: guard the output's settings, list and shard the units, skip the done ones,
run the rest, then write rejected.parquet, the FAISS index (when the whole job is done) and metrics.json."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from embedpipe.kernels.engine import Engine

from .config import ConfigError, JobConfig
from .embed import make_tokenizer
from .manifest import check_or_write_settings, completed_units
from .outputs import (check_index_factory, index_outputs, job_settings, write_metrics, write_rejected_table,
                      write_unit_list)
from .progress import Progress
from .runner import UnitRunner
from .sources import WorkUnit, list_units
from .tokenizer import TextTokenizer
from .tokenizer_pool import TokenizerPool

TEMPORARY_FOLDERS = ("embeddings", "rejected", "manifest", ".")


@dataclass
class JobResult:
    metrics: dict
    exit_code: int  # 0: every unit of this run's share is done; 3: done but for skipped bad files


def run_job(job: JobConfig) -> JobResult:
    engine, tokenizer = load_engine(job)
    settings = job_settings(job, engine, tokenizer)
    check_index_factory(job.index_factory, engine.output.width, engine.output.dtype == "binary")
    job.output.mkdir(parents=True, exist_ok=True)
    check_or_write_settings(job.output, settings, job.overwrite)
    if not job.sharded:
        remove_temporaries(job.output)  # left by a killed run; nobody else writes here
    bad_listing: list[tuple[str, str]] = []
    units = list_units(list(job.inputs), job.rows_per_unit, bad_listing if job.skip_bad_files else None)
    write_unit_list(job.output, units)
    mine = units[job.shard_index::job.num_shards]
    done_before = completed_units(job.output)
    pending = [unit for unit in mine if unit.unit_id not in done_before]
    with Progress(expected_rows(pending), job.quiet) as progress:
        _log_start(progress, job, units, mine, pending, done_before)
        with TokenizerPool(tokenizer, job.num_workers) as pool:
            runner = UnitRunner(job, engine, pool, progress)
            runner.run(pending)
        metrics = run_metrics(runner, pool, progress)
        metrics["bad_files"] = [{"path": p, "error": e} for p, e in bad_listing] + runner.counts.bad_files
        return _finish(job, settings, units, mine, metrics, progress)


def run_metrics(runner: UnitRunner, pool: TokenizerPool, progress: Progress) -> dict:
    counts, stats, seconds = runner.counts, runner.batcher.stats, max(progress.seconds, 1e-9)
    return {"rows": counts.rows, "tokens": counts.tokens, "rejected_rows": counts.rejected,
            "truncated_texts": pool.num_truncated, "padding_waste": stats.padding_waste,
            "batches": stats.batches, "seconds": seconds, "tokens_per_s": counts.tokens / seconds,
            "out_of_memory_splits": runner.oom.num_splits,
            "embeddings_per_s": counts.rows / seconds,
            "engine": {**runner.engine.counters.as_dict(), "device": str(runner.engine.device)}}


def load_engine(job: JobConfig) -> tuple[Engine, TextTokenizer]:
    try:
        engine = Engine(job.engine)
        return engine, make_tokenizer(engine, job.prompt, job.prompt_name)
    except ValueError as error:  # a setting the model cannot take (dim, prompt name)
        raise ConfigError(str(error)) from error


def _finish(job: JobConfig, settings: dict, units: list[WorkUnit], mine: list[WorkUnit],
            metrics: dict, progress: Progress) -> JobResult:
    done = completed_units(job.output)
    bad_paths = {bad["path"] for bad in metrics["bad_files"]}
    missing = [unit.unit_id for unit in mine if unit.unit_id not in done and unit.path not in bad_paths]
    metrics["units"] = {"listed": len(units), "this_run": len(mine), "done": sum(u.unit_id in done for u in mine),
                        "shard": [job.shard_index, job.num_shards]}
    metrics["output_rows"] = sum(record["num_rows"] for record in done.values())
    metrics["output_rejected_rows"] = write_rejected_table(job.output)
    if not job.sharded and units and not missing:
        meta = index_outputs([job.output], job.output, job.index_factory, settings)
        metrics["index"] = {key: meta.get(key)
                            for key in ("factory", "metric", "num_rows", "dimension", "duplicate_ids")}
    write_metrics(job.output, metrics)
    progress.log(summary(metrics, job.output))
    if missing:  # every unit ends done or in a raised error
        raise RuntimeError(f"{len(missing)} units were not completed, with no error (first: {missing[0]})")
    return JobResult(metrics, 3 if metrics["bad_files"] else 0)


def _log_start(progress: Progress, job: JobConfig, units: list[WorkUnit], mine: list[WorkUnit],
               pending: list[WorkUnit], done: dict) -> None:
    share = f" (shard {job.shard_index} of {job.num_shards}: {len(mine)})" if job.sharded else ""
    progress.log(f"{len(units)} units{share}, {len(mine) - len(pending)} already done, {len(pending)} to do")
    stale = set(done) - {unit.unit_id for unit in units}
    if stale:
        progress.log(f"warning: {job.output} holds {len(stale)} done units that are not among the inputs "
                     f"(e.g. {sorted(stale)[0]!r}); they stay in the index (--overwrite starts afresh)")


def summary(metrics: dict, output: Path) -> str:
    line = (f"embedded {metrics['rows']:,} rows ({metrics['rejected_rows']:,} rejected, "
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


def expected_rows(units: list[WorkUnit]) -> int | None:
    """Rows in the units, from Parquet footers; None when a unit's size is unknown (JSONL, CSV)."""
    total, footers = 0, {}
    for unit in units:
        if unit.format == "hf":
            total += unit.stop - unit.start
        elif unit.format == "parquet":
            if unit.path not in footers:
                footers[unit.path] = pq.read_metadata(unit.path)
            total += sum(footers[unit.path].row_group(g).num_rows for g in range(unit.start, unit.stop))
        else:
            return None
    return total


def remove_temporaries(output: Path) -> None:
    """Deletes the hidden temporary files of writers that never finished."""
    for folder in TEMPORARY_FOLDERS:
        for path in (output / folder).glob(".*.tmp-*"):
            path.unlink(missing_ok=True)
