"""The `embedpipe` command line. Commands parse options, build config dataclasses and call the pipeline."""
from __future__ import annotations

from typing import Optional

import typer

from embedpipe.cli.options import (DEVICE, DIM, DTYPE, MODEL, PROMPT, PROMPT_NAME, Device, OutputDtype,  # noqa: F401
                                   engine_config)

app = typer.Typer(help="Offline batch embedding and indexing on ragged, graph-replayed engines.",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _group():
    """Offline batch embedding and indexing on ragged, graph-replayed engines."""


@app.command()
def embed(texts: list[str] = typer.Argument(..., help="Texts to embed."),
          model: str = MODEL, dim: Optional[int] = DIM, dtype: OutputDtype = DTYPE,
          prompt: Optional[str] = PROMPT, prompt_name: Optional[str] = PROMPT_NAME, device: Device = DEVICE):
    """Print the embedding of each TEXT as a JSON line."""
    from embedpipe.pipeline.commands import run_embed
    run_embed(engine_config(model, dim, dtype, device), texts, prompt, prompt_name)


from embedpipe.cli.index import index, merge, query  # noqa: E402 - their options live in cli/index.py
app.command()(index)
app.command()(merge)
app.command()(query)
from embedpipe.cli.tokenize import tokenize  # noqa: E402
app.command()(tokenize)
from embedpipe.cli.serve import serve  # noqa: E402 - its options live in cli/serve.py
app.command()(serve)
from embedpipe.cli.warmup import warmup  # noqa: E402
app.command()(warmup)
from embedpipe.cli.verify import verify  # noqa: E402
app.command()(verify)


def main():
    app()


if __name__ == "__main__":
    main()
