"""`embedpipe index`, `merge` and `query`: options -> pipeline calls. Registered on the app in cli/main.py."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from embedpipe.cli.options import (CHUNK_ON, CHUNK_OVERLAP, CHUNK_TOKENS, DEVICE, DIM, DTYPE, EF_SEARCH, LATE_CHUNKING,
                                   MAX_LENGTH, MODEL, NPROBE, PROMPT, PROMPT_NAME, ChunkOn, OutputDtype)
from embedpipe.pipeline.config import IndexOptions

DEFAULTS = IndexOptions()


class Precision(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class BadRowPolicy(str, Enum):
    skip = "skip"
    fail = "fail"


def given_options(ctx: typer.Context) -> dict:
    """The options typed on the command line (not defaults), as plain values."""
    given = {}
    for name, value in ctx.params.items():
        source = ctx.get_parameter_source(name)  # typer vendors click: compare the enum by name
        if name != "config" and source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[name] = tuple(value) if isinstance(value, list) else getattr(value, "value", value)
    return given


INPUTS = typer.Argument(None, help="Parquet / JSONL / CSV files, folders, globs, or datasets saved with save_to_disk.")
OUTPUT = typer.Option(None, "--output", "-o", help="Output folder (required, here or in --config).")
CONFIG = typer.Option(
    None, "--config", help="TOML file of these options (same names, dashes or underscores); the command line wins.")
TEXT_COLUMN = typer.Option(DEFAULTS.text_column, "--text-column", help="Column of the texts.")
ID_COLUMN = typer.Option(None, "--id-column", help="Column of the ids (default: id when present, else FILE:ROW).")
KEEP_COLUMNS = typer.Option(
    None, "--keep-columns", help="Columns stored next to each row's result, the text column too (comma-separated, or "
                                 "repeat the option); with --chunk-tokens, a kept text column holds the window's text.")
ROWS_PER_UNIT = typer.Option(
    DEFAULTS.rows_per_unit, "--rows-per-unit", help="Rows per unit of work (whole Parquet row groups).")
READ_ROWS = typer.Option(DEFAULTS.read_rows, "--read-rows", help="Rows per read batch and tokenizer task.")
RAY = typer.Option(
    None, "--ray", metavar="ADDRESS",
    help="Run on a Ray cluster (pip install 'embedpipe\\[ray]'): auto (the running one: RAY_ADDRESS or "
         "`ray start` here), local (a new one on this machine), HOST:PORT or ray://HOST:PORT.")
SHARD_INDEX = typer.Option(None, "--shard-index", help="This job's shard, 0 to num-shards - 1.")
NUM_SHARDS = typer.Option(
    None, "--num-shards", help="Split the units into this many shards (index them with `embedpipe merge`).")
ON_BAD_ROW = typer.Option(
    BadRowPolicy(DEFAULTS.on_bad_row), "--on-bad-row",
    help="A null, empty or whitespace text: skip (record it in rejected.parquet) or fail.")
SKIP_BAD_FILES = typer.Option(
    False, "--skip-bad-files", help="Record unreadable files in metrics.json and go on (exit code 3).")
PRUNE = typer.Option(False, "--prune", help="Drop the done units whose input file is no longer among INPUTS (from the "
                                           "embeddings and the index); without it they are kept, with a warning.")
OVERWRITE = typer.Option(
    False, "--overwrite", help="Discard everything OUTPUT holds and start afresh (a whole job, not shards).")
QUIET = typer.Option(False, "--quiet", "-q", help="No progress output.")


def index(
    ctx: typer.Context,
    inputs: Optional[list[str]] = INPUTS, output: Optional[str] = OUTPUT, config: Optional[Path] = CONFIG,
    model: str = MODEL, device: str = DEVICE,
    precision: Optional[Precision] = typer.Option(
        None, "--precision", help="Weights and activations (default: bfloat16 on CUDA, float32 on CPU)."),
    dtype: OutputDtype = DTYPE, dim: Optional[int] = DIM,
    prompt: Optional[str] = PROMPT, prompt_name: Optional[str] = PROMPT_NAME, max_length: Optional[int] = MAX_LENGTH,
    chunk_tokens: Optional[int] = CHUNK_TOKENS, chunk_overlap: Optional[int] = CHUNK_OVERLAP,
    chunk_on: Optional[ChunkOn] = CHUNK_ON, late_chunking: bool = LATE_CHUNKING,
    text_column: str = TEXT_COLUMN,
    token_ids_column: Optional[str] = typer.Option(
        None, "--token-ids-column",
        help="Embed this list<int> column of token ids instead of the texts (e.g. `token_ids` in the files of "
             "`embedpipe tokenize`); ids are checked against the model's vocabulary, cut to its max length."),
    id_column: Optional[str] = ID_COLUMN, keep_columns: Optional[list[str]] = KEEP_COLUMNS,
    index_factory: Optional[str] = typer.Option(
        DEFAULTS.index_factory, "--index-factory",
        help="FAISS index: Flat, HNSW32, IVF4096,PQ64, ... (default: Flat; SQ8 for --dtype int8)."),
    rows_per_unit: int = ROWS_PER_UNIT, read_rows: int = READ_ROWS,
    max_batch_tokens: Optional[int] = typer.Option(
        None, "--max-batch-tokens", help="Padded tokens per engine batch (default: 16384 on a GPU, 4096 on the CPU)."),
    max_batch_seqs: int = typer.Option(DEFAULTS.max_batch_seqs, "--max-batch-seqs", help="Texts per engine batch."),
    workers: Optional[int] = typer.Option(
        None, "--workers",
        help="Tokenizer processes (default: CPU count - 1 on a GPU; 0 on the CPU: tokenize in the main process)."),
    devices: Optional[str] = typer.Option(
        None, "--devices",
        help="One engine process per device, sharing the units: all (every GPU), 0,1,3 (these GPUs), gpu:N, "
             "or cpu:N (N CPU engines). --workers is then per engine."),
    ray: Optional[str] = typer.Option(
        None, "--ray", metavar="ADDRESS",
        help="Run on a Ray cluster (pip install 'embedpipe[ray]'): auto (the running one: RAY_ADDRESS or "
             "`ray start` here), local (a new one on this machine), HOST:PORT or ray://HOST:PORT. "
             "--devices: all (default), gpu:N or cpu:N."),
    shard_index: Optional[int] = SHARD_INDEX, num_shards: Optional[int] = NUM_SHARDS,
    on_bad_row: BadRowPolicy = ON_BAD_ROW, skip_bad_files: bool = SKIP_BAD_FILES,
    overwrite: bool = OVERWRITE, prune: bool = PRUNE, quiet: bool = QUIET,
):
    """Embed every row of INPUTS into OUTPUT: Parquet per unit, then a FAISS index. Resumable: a run again
    redoes the units whose input changed since they were embedded."""
    from embedpipe.cli.commands import run_index
    run_index(given_options(ctx), config)


def merge(
    outputs: list[Path] = typer.Argument(..., help="Output folders of one job, e.g. its shards."),
    into: Optional[Path] = typer.Option(None, "--into", help="Folder for the index (default: the first OUTPUT)."),
    index_factory: Optional[str] = typer.Option(
        None, "--index-factory", help="FAISS index factory (default: the job's: Flat; SQ8 for --dtype int8)."),
    allow_incomplete: bool = typer.Option(
        False, "--allow-incomplete", help="Index what is done even when some units of the job are not."),
):
    """Build one FAISS index over several OUTPUT folders (the shards of one job)."""
    from embedpipe.cli.commands import run_merge
    run_merge(outputs, into or outputs[0], index_factory, allow_incomplete)


def export(
    output: Path = typer.Argument(..., help="An index job's output folder."),
    destination: str = typer.Argument(..., help="lancedb://DIR or lancedb://DIR#TABLE (default table: embeddings)."),
    ann_index: bool = typer.Option(False, "--ann-index", help="Then build LanceDB's ANN index on the vectors."),
):
    """Write OUTPUT's embeddings (id, vector, kept columns) to a LanceDB table (pip install 'embedpipe[lancedb]').
    Resumable: a run adds the units the table lacks and removes those redone or dropped since."""
    from embedpipe.cli.commands import run_export
    run_export(output, destination, ann_index)


def query(
    text: str = typer.Argument(..., help="The query text."),
    index: Optional[Path] = typer.Option(
        None, "--index", help="An output folder with an index; without it, print the embedding."),
    k: int = typer.Option(10, "-k", "--top-k", help="Hits to print."),
    as_json: bool = typer.Option(False, "--json", help="Print the hits as JSON."),
    model: Optional[str] = typer.Option(
        None, "--model", "-m",
        help="Without --index: the model (default: minilm). With it, the index's model is used."),
    dim: Optional[int] = DIM, dtype: Optional[OutputDtype] = typer.Option(
        None, "--dtype", help="Without --index: the output dtype (default: float32)."),
    prompt: Optional[str] = PROMPT,
    prompt_name: Optional[str] = typer.Option(
        None, "--prompt-name", help="A prompt of the model (default: its `query` prompt when it has one)."),
    device: str = DEVICE, nprobe: Optional[int] = NPROBE, ef_search: Optional[int] = EF_SEARCH,
    rerank: Optional[str] = typer.Option(
        None, "--rerank", metavar="M",
        help="Rerank the -k hits with this reranker folder against TEXT (each hit's document: its kept text column, "
             "so index with --keep-columns text) and print them by rerank score."),
    top: Optional[int] = typer.Option(None, "--top", min=1,
                                      help="With --rerank: print only the best N (default: all k)."),
):
    """Embed TEXT with the index's model and settings (query prompt applied) and print the top-k rows; with --rerank,
    rescore them with a reranker and print them best first."""
    from embedpipe.cli.commands import run_query
    run_query(text, index, k, as_json, model, dim, dtype and dtype.value, prompt, prompt_name, device,
              nprobe, ef_search, rerank, top)
