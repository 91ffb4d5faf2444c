"""`embedpipe tokenize`: the CPU side of an index job alone, written down once.

Reads and tokenizes the inputs as `index` does (the same units, pieces, workers, prompts and
truncation) and writes, per unit, OUTPUT/tokens/<unit>.parquet: the id, `token_ids`
(list<int32>) and the kept columns, with the tokenizer's fingerprint and the prompt in the
file's metadata. `index OUTPUT/tokens --token-ids-column token_ids` then embeds them at the
engine's speed, and refuses files made by another tokenizer or with another prompt. Resumable,
shardable and locked like `index` (manifest/, units.json, job.json, rejected/ as there).
"""
from __future__ import annotations

import os
from typing import Callable

from embedpipe.pipeline.config import ConfigError, JobConfig
from embedpipe.pipeline.index.job import JobResult, check_all_ended, missing_units, new_output
from embedpipe.pipeline.index.plan import job_tokenizer, plan_units
from embedpipe.pipeline.output.lock import output_lock
from embedpipe.pipeline.output.manifest import completed_units
from embedpipe.pipeline.output.job_files import write_metrics, write_rejected_table
from embedpipe.pipeline.util.progress import Progress
from embedpipe.pipeline.index.reader import read_and_tokenize
from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.output.layout import TOKENS_FOLDER
from embedpipe.pipeline.index.token_files import TOKEN_IDS_COLUMN, TokenFilesRunner
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.text.tokenizer_pool import TokenizerPool
from embedpipe.pipeline.index.unit_files import RunCounts

TokenizeUnits = Callable[[JobConfig, TextTokenizer, list[WorkUnit], Progress], RunCounts]


def tokenize_settings(job: JobConfig, tokenizer: TextTokenizer) -> dict:
    """What fixes a tokenize job's output (OUTPUT/job.json): the tokenizer, the prompt and the columns."""
    return {"kind": "tokenize", "model": job.engine.model, "tokenizer": tokenizer.fingerprint,
            "prompt": tokenizer.prompt, "max_seq_length": tokenizer.max_length, "text_column": job.columns.text,
            "id_column": job.columns.id, "keep_columns": list(job.columns.keep), "rows_per_unit": job.rows_per_unit}


def run_tokenize(job: JobConfig, tokenize_units: TokenizeUnits | None = None) -> JobResult:
    """The whole tokenize job, holding OUTPUT's lock (raises OutputLocked when another run holds it).

    tokenize_units(job, tokenizer, pending units, progress): this process's tokenizer pool by default
    (api.run_tokenize gives Ray's tasks for --ray)."""
    tokenize_units = tokenize_units or tokenize_locally
    if job.chunking is not None:  # a token file's row is a text, and index --token-ids-column cannot cut it
        raise ConfigError("tokenize writes each text's token ids whole; --chunk-tokens is an option of index")
    _, tokenizer = job_tokenizer(job)
    with new_output(job.output), output_lock(job.output, shard=job.shard):
        settings = tokenize_settings(job, tokenizer)
        units, mine, pending, done_before, bad_listing, _ = plan_units(job, settings, TOKENS_FOLDER)
        with Progress(None, job.quiet) as progress:
            progress.log(f"{len(units)} units, {len(mine) - len(pending)} already done, {len(pending)} to do")
            counts = tokenize_units(job, tokenizer, pending, progress)
            return finish_tokenize(job, mine, counts, bad_listing, progress)


def tokenize_locally(job: JobConfig, tokenizer: TextTokenizer, units: list[WorkUnit], progress: Progress) -> RunCounts:
    workers = job.num_workers if job.num_workers is not None else max(1, (os.cpu_count() or 2) - 1)
    runner = TokenFilesRunner(job, tokenizer, progress)
    with TokenizerPool(tokenizer, workers) as pool:
        runner.run(read_and_tokenize(job, pool, units))
    return runner.counts


def finish_tokenize(job: JobConfig, mine: list[WorkUnit], counts: RunCounts, bad_listing: list,
                    progress: Progress) -> JobResult:
    """Writes rejected.parquet and metrics.json, and logs the summary."""
    done = completed_units(job.output, TOKENS_FOLDER)
    seconds = max(progress.seconds, 1e-9)
    bad_files = [{"path": p, "error": e} for p, e in bad_listing] + counts.bad_files
    metrics = {"rows": counts.rows, "tokens": counts.tokens, "rejected_rows": counts.rejected,
               "truncated_texts": counts.truncated, "seconds": seconds, "tokens_per_s": counts.tokens / seconds,
               "rows_per_s": counts.rows / seconds, "bad_files": bad_files,
               "units": {"this_run": len(mine), "done": sum(u.unit_id in done for u in mine),
                         "shard": [job.shard_index, job.num_shards]},
               "output_rows": sum(record["num_rows"] for record in done.values()),
               "output_rejected_rows": write_rejected_table(job.output)}
    write_metrics(job.output, metrics)
    progress.log(f"tokenized {counts.rows:,} rows ({counts.rejected:,} rejected, {counts.truncated:,} truncated) "
                 f"in {seconds:.1f} s: {metrics['tokens_per_s']:,.0f} tokens/s; token ids in "
                 f"{job.output / TOKENS_FOLDER} (embed them with index --token-ids-column {TOKEN_IDS_COLUMN})")
    check_all_ended(missing_units(mine, done, bad_files))
    return JobResult(metrics, 3 if bad_files else 0)
