"""The `embedpipe` command line. Commands parse options, build config dataclasses and call the pipeline."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from embedpipe.cli.options import (CHUNK_ON, CHUNK_OVERLAP, CHUNK_TOKENS, DEVICE, DIM, DTYPE,  # noqa: F401
                                   LATE_CHUNKING, MAX_LENGTH, MODEL, PROMPT, PROMPT_NAME, ChunkOn, OutputDtype,
                                   engine_config)

# help as plain text: Rich markup ate "[ray]" in a help string and showed "<bool>" after every flag
app = typer.Typer(help="Offline batch embedding and indexing on ragged, graph-replayed engines.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version
        print(f"embedpipe {version('embedpipe')}")
        raise typer.Exit()


@app.callback()
def _group(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                        help="Print the version and exit.")):
    """Offline batch embedding and indexing on ragged, graph-replayed engines."""


@app.command()
def embed(texts: Optional[list[str]] = typer.Argument(None, help="Texts to embed; - reads them from standard input."),
          input_file: Optional[Path] = typer.Option(
              None, "--input-file", "-i",
              help="Read the texts from this file (- : standard input): one a line, or with a .jsonl name JSON "
                   "lines with a \"text\" field. Blank lines are skipped."),
          model: str = MODEL, dim: Optional[int] = DIM, dtype: OutputDtype = DTYPE,
          prompt: Optional[str] = PROMPT, prompt_name: Optional[str] = PROMPT_NAME,
          max_length: Optional[int] = MAX_LENGTH, chunk_tokens: Optional[int] = CHUNK_TOKENS,
          chunk_overlap: Optional[int] = CHUNK_OVERLAP, chunk_on: Optional[ChunkOn] = CHUNK_ON,
          late_chunking: bool = LATE_CHUNKING, device: str = DEVICE):
    """Print the embedding of each TEXT as a JSON line ({"text": ..., "embedding": [...]}); with --chunk-tokens, of
    each window ({"input": i, "chunk": c, "char_start": s, "char_end": e, "text": TEXT[s:e], "embedding": [...]})."""
    from embedpipe.cli.commands import chunk_config, read_texts, run_embed
    chunking = chunk_config(chunk_tokens, chunk_overlap, chunk_on and chunk_on.value, late_chunking)
    run_embed(engine_config(model, dim, dtype, device), read_texts(texts, input_file), prompt, prompt_name, max_length,
              chunking)


from embedpipe.cli.index import export, index, merge, query  # noqa: E402 - their options live in cli/index.py
app.command()(index)
app.command()(merge)
app.command()(export)
app.command()(query)
from embedpipe.cli.tokenize import tokenize  # noqa: E402
app.command()(tokenize)
from embedpipe.cli.serve import serve  # noqa: E402 - its options live in cli/serve.py
app.command()(serve)
from embedpipe.cli.warmup import warmup  # noqa: E402
app.command()(warmup)
from embedpipe.cli.verify import verify  # noqa: E402
app.command()(verify)
from embedpipe.cli.rerank import rerank  # noqa: E402 - its options live in cli/rerank.py
app.command()(rerank)


def main():
    """Runs the command; after a success, ends the process without the interpreter's teardown.

    By then the command has closed what it opened (workers reaped, files committed, Ray left); what
    the teardown would still do is free the CUDA context and the job's arrays one by one, half a
    second of an index job's wall time on the H200 (0.6 s, against 0.1 s without). A failure takes the
    normal exit: objects its traceback held (a --devices job's queues) are released then, and
    multiprocessing's tracker would otherwise report them as leaked.
    """
    try:
        app()
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
