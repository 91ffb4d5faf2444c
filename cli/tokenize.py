"""`embedpipe tokenize`: the index job's CPU side alone, its token ids written per unit. Registered in cli/main.py."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from embedpipe.cli.index import (CONFIG, ID_COLUMN, INPUTS, KEEP_COLUMNS, NUM_SHARDS, ON_BAD_ROW, OUTPUT, OVERWRITE,
                                 QUIET, RAY, READ_ROWS, ROWS_PER_UNIT, SHARD_INDEX, SKIP_BAD_FILES, TEXT_COLUMN,
                                 BadRowPolicy, given_options)
from embedpipe.cli.options import MAX_LENGTH, MODEL, PROMPT, PROMPT_NAME


def tokenize(
    ctx: typer.Context,
    inputs: Optional[list[str]] = INPUTS, output: Optional[str] = OUTPUT, config: Optional[Path] = CONFIG,
    model: str = MODEL, prompt: Optional[str] = PROMPT, prompt_name: Optional[str] = PROMPT_NAME,
    max_length: Optional[int] = MAX_LENGTH,
    text_column: str = TEXT_COLUMN, id_column: Optional[str] = ID_COLUMN,
    keep_columns: Optional[list[str]] = KEEP_COLUMNS, rows_per_unit: int = ROWS_PER_UNIT,
    read_rows: int = READ_ROWS,
    workers: Optional[int] = typer.Option(None, "--workers", help="Tokenizer processes (default: CPU count - 1)."),
    ray: Optional[str] = RAY, shard_index: Optional[int] = SHARD_INDEX, num_shards: Optional[int] = NUM_SHARDS,
    on_bad_row: BadRowPolicy = ON_BAD_ROW, skip_bad_files: bool = SKIP_BAD_FILES,
    overwrite: bool = OVERWRITE, quiet: bool = QUIET,
):
    """Tokenize every row of INPUTS with MODEL's tokenizer (and prompt) into OUTPUT/tokens: id, token_ids and the
    kept columns per unit, for `index OUTPUT/tokens --token-ids-column token_ids` on GPUs. Resumable."""
    from embedpipe.cli.commands import run_tokenize
    run_tokenize(given_options(ctx), config)
