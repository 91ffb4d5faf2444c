"""Planning an index (or tokenize) job before anything is embedded: the model's spec and tokenizer, the
settings OUTPUT keeps (job.json), the units listed and sharded, their column types checked, the done
ones skipped."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

import pyarrow.parquet as pq

from embedpipe.kernels.engine import ModelSpec, model_spec
from embedpipe.kernels.models.model_folder import builtin_models
from embedpipe.pipeline.config import ConfigError, JobConfig
from embedpipe.pipeline.inputs.column_types import ColumnTypes
from embedpipe.pipeline.inputs.sources import (ColumnSpec, UnreadableInputError, WorkUnit, jsonl_lines, list_units,
                                              unit_rows, unit_schema)
from embedpipe.pipeline.output.job_files import check_index_factory, write_unit_list
from embedpipe.pipeline.output.layout import (EMBEDDINGS_FOLDER, REJECTED_FOLDER, TEMPORARY_FOLDERS, TOKENS_FOLDER,
                                              WINDOW_COLUMNS, manifest_record, unit_file)
from embedpipe.pipeline.output.manifest import (check_settings, completed_columns, completed_units, damaged_units,
                                                drop_units, input_changed, rename_unit, store_settings)
from embedpipe.pipeline.output.sinks import remove_unfinished
from embedpipe.pipeline.text.late_chunking import chunker_of
from embedpipe.pipeline.text.tokenizer import TextTokenizer, make_tokenizer


@dataclass
class PreparedJob:
    """A job whose settings are stored in OUTPUT and whose pending units are known."""

    job: JobConfig
    spec: ModelSpec
    tokenizer: TextTokenizer
    settings: dict
    units: list[WorkUnit]  # every unit of the job, all shards
    mine: list[WorkUnit]  # this shard's
    pending: list[WorkUnit]  # this shard's units that are not done yet
    done_before: dict[str, dict]
    bad_listing: list[tuple[str, str]]  # (path, error) of files skipped while listing
    changes: InputChanges


@dataclass
class InputChanges:
    """What changed in the inputs since OUTPUT's units were embedded (completion records against the listing).

    changed: done units of this run whose input's fingerprint differs now: dropped, and redone.
    relisted: done units not listed any more from a file that still is (rewritten with other row groups,
      so the unit names mean other rows): dropped (a whole job only).
    renamed: done units listed under another name, with the same rows of an unchanged input (an output
      of an earlier version, whose unit names were not zero-padded): recorded under the new name.
    removed: done units whose file is no longer among the inputs: kept, unless --prune (a whole job only).
    damaged: done units of this run whose unit file cannot be read or lost rows (manifest.damaged_units):
      dropped, and redone. (record, what is wrong) each.
    """

    new: int = 0
    changed: list[dict] = field(default_factory=list)
    relisted: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    renamed: list[tuple[dict, WorkUnit]] = field(default_factory=list)
    damaged: list[tuple[dict, str]] = field(default_factory=list)
    pruned: bool = False

    @property
    def dropped(self) -> list[dict]:
        dropped = self.changed + self.relisted + (self.removed if self.pruned else [])
        ids = {record["unit_id"] for record in dropped}
        return dropped + [record for record, _ in self.damaged if record["unit_id"] not in ids]


def input_changes(units: list[WorkUnit], mine: list[WorkUnit], done: dict[str, dict], whole_job: bool,
                  prune: bool) -> InputChanges:
    listed, listed_paths = {u.unit_id: u for u in units}, {u.path for u in units}
    changes = InputChanges(new=sum(u.unit_id not in done for u in mine), pruned=prune and whole_job)
    changes.changed = [done[u.unit_id] for u in mine if u.unit_id in done and input_changed(done[u.unit_id], u)]
    by_rows = {(u.path, u.format, u.start, u.stop): u for u in units}
    for unit_id, record in done.items():
        if unit_id in listed:
            continue
        same = by_rows.get((record["path"], record["format"], record["start"], record["stop"]))
        if same is not None and same.unit_id not in done and not input_changed(record, same):
            changes.renamed.append((record, same))
        elif whole_job:
            (changes.relisted if record["path"] in listed_paths else changes.removed).append(record)
    changes.new -= sum(unit in mine for _, unit in changes.renamed)
    return changes


def job_tokenizer(job: JobConfig) -> tuple[ModelSpec, TextTokenizer]:
    """The model's spec and tokenizer (with the job's prompt), read once per job; the windows of --chunk-tokens
    checked against them."""
    try:
        spec = model_spec(job.engine)
        tokenizer = make_tokenizer(spec, job.prompt, job.prompt_name, job.max_length)
        if job.chunking is not None:
            check_chunking(job, spec, tokenizer)
        return spec, tokenizer
    except ValueError as error:  # a setting the model cannot take (dim, prompt name, chunk tokens)
        raise ConfigError(str(error)) from error


def check_chunking(job: JobConfig, spec: ModelSpec, tokenizer: TextTokenizer) -> None:
    """Raises ValueError when --chunk-tokens leaves no room for text (WindowCutter), --late-chunking meets a
    model that pools by CLS, or the text, id or a kept column has the name of a window column."""
    chunker_of(tokenizer, job.chunking)
    if job.chunking.late:
        spec.output.check_span_pooling()
    columns = job.columns
    taken = [name for name in (columns.text, columns.id or "id", *columns.keep) if name in WINDOW_COLUMNS]
    if taken:
        raise ValueError(f"column {taken[0]!r}: with --chunk-tokens, {', '.join(WINDOW_COLUMNS)} name each "
                         "window's columns; rename it in the input")


def prepare_job(job: JobConfig, spec: ModelSpec, tokenizer: TextTokenizer) -> PreparedJob:
    """Checks the settings against OUTPUT (or stores them), lists the units and finds this run's pending ones."""
    settings = job_settings(job, spec, tokenizer)

    def check_index(units: list[WorkUnit]) -> None:
        # with --chunk-tokens, the rows (windows) are not known before the texts are cut: the build checks them
        check_index_factory(job.index_factory, spec.output.width, spec.output.dtype == "binary",
                            lambda: None if job.chunking is not None else expected_rows(units))

    return PreparedJob(job, spec, tokenizer, settings, *plan_units(job, settings, check=check_index))


def plan_units(job: JobConfig, settings: dict, folder: str = EMBEDDINGS_FOLDER,
               check: Callable[[list[WorkUnit]], None] = lambda units: None) -> tuple:
    """(units, mine, pending, done_before, bad_listing) of a job writing one file per unit into OUTPUT/folder.

    Everything is checked before OUTPUT is written: the stored settings, the inputs' columns and their
    types, and check(units) (the index factory against the row count); a job that fails a check leaves
    OUTPUT as it was, so the corrected command is not refused for "other settings"."""
    bad_listing: list[tuple[str, str]] = []
    units = list_units(list(job.inputs), job.rows_per_unit, bad_listing if job.skip_bad_files else None,
                       exclude=(str(job.output),))
    afresh = check_settings(job.output, settings, job.overwrite)
    check_job_types(None if afresh else job.output, units, job.columns, folder)
    check(units)
    store_settings(job.output, settings, afresh)
    mine = units[job.shard_index::job.num_shards]
    # left by a killed run: a whole job's anywhere (nobody else writes here), a shard's of its own units
    # (it holds their shard's lock; the other shards may be writing theirs)
    remove_temporaries(job.output, None if not job.sharded else [unit.unit_id for unit in mine])
    write_unit_list(job.output, units)
    done = completed_units(job.output, folder)
    changes = input_changes(units, mine, done, not job.sharded, job.prune)
    for record, unit in changes.renamed:
        done[unit.unit_id] = rename_unit(job.output, done.pop(record["unit_id"]), unit)
    # a whole job owns every unit file; a shard, its own units' (the others' are their shards')
    mine_ids = {unit.unit_id for unit in mine}
    damaged = damaged_units(job.output, [r for unit_id, r in done.items() if not job.sharded or unit_id in mine_ids],
                            folder)
    changes.damaged = [(done[unit_id], why) for unit_id, why in damaged.items()]
    drop_units(job.output, changes.dropped, folder)
    dropped = {record["unit_id"] for record in changes.dropped}
    done_before = {unit_id: record for unit_id, record in done.items() if unit_id not in dropped}
    pending = [unit for unit in mine if unit.unit_id not in done_before]
    return units, mine, pending, done_before, bad_listing, changes


def job_settings(job: JobConfig, spec: ModelSpec, tokenizer: TextTokenizer) -> dict:
    """What fixes the embeddings of a job (OUTPUT/job.json); `query` rebuilds the engine from it."""
    output = spec.output
    # a short name or a Hugging Face id as given (the same weights elsewhere); a local folder by its full path
    named = job.engine.model in builtin_models() or not Path(job.engine.model).expanduser().is_dir()
    model = job.engine.model if named else str(spec.folder.path)
    settings = {"model": model,
                "pooling": output.pooling, "normalize": output.normalize, "dim": output.dim,
                "dtype": output.dtype, "prompt": tokenizer.prompt, "max_seq_length": tokenizer.max_length,
                "text_column": job.columns.text, "id_column": job.columns.id,
                "keep_columns": list(job.columns.keep), "rows_per_unit": job.rows_per_unit}
    if job.columns.token_ids:  # only then: the outputs of earlier versions keep their settings
        settings["token_ids_column"] = job.columns.token_ids
    if job.chunking is not None:  # likewise
        settings |= job.chunking.settings()
    return settings


def check_job_types(output: Path | None, units: list[WorkUnit], columns: ColumnSpec,
                    folder: str = EMBEDDINGS_FOLDER) -> None:
    """Before anything is embedded: the id and kept columns of the job's Parquet and dataset units keep
    one kind of type across its files (in unit order, after the output's completed units), as
    ColumnTypes checks each batch read. Raises ColumnTypeChange naming the first file that breaks it,
    for every shard of a job alike, so a --devices or Ray job fails at its start instead of at the
    index build. JSONL and CSV files are checked as they are read; a file that cannot be read is left
    to the reader, which reports (or skips) it."""
    types = ColumnTypes(completed_columns(output, folder) if output is not None else None)
    for unit in units:
        try:  # a missing or mistyped column raises here; an unreadable file is the reader's (or skipped)
            schema, rows = unit_schema(unit, columns), unit_rows(unit)
        except UnreadableInputError:
            continue
        if schema is not None:
            types.check(schema, rows[1] - rows[0], unit.path)


def expected_rows(units: list[WorkUnit]) -> int | None:
    """Rows in the units, from Parquet footers, dataset slices and JSONL line counts (blank lines count too);
    None when a unit's size is unknown (CSV, whose values may hold line breaks; compressed JSONL)."""
    total, footers = 0, {}
    for unit in units:
        if unit.format == "hf":
            total += unit.stop - unit.start
        elif unit.format == "parquet":
            if unit.path not in footers:
                footers[unit.path] = pq.read_metadata(unit.path)
            total += sum(footers[unit.path].row_group(g).num_rows for g in range(unit.start, unit.stop))
        elif (lines := jsonl_lines(unit)) is not None:
            total += lines
        else:
            return None
    return total


def remove_temporaries(output: Path, unit_ids: list[str] | None = None) -> None:
    """Deletes the hidden temporary files of writers that never finished: all of them, or those of `unit_ids`'
    files (sinks.temporary_path names them .<final name>.tmp-<pid>-...)."""
    if unit_ids is None:
        for folder in TEMPORARY_FOLDERS:
            remove_unfinished(output / folder)
        return
    for unit_id in unit_ids:
        finals = [unit_file(output, folder, unit_id) for folder in (EMBEDDINGS_FOLDER, TOKENS_FOLDER, REJECTED_FOLDER)]
        for final in [*finals, manifest_record(output, unit_id)]:
            remove_unfinished(final.parent, final.name)
