"""The `embedpipe` command line. Commands parse options, build config dataclasses and call the pipeline."""
from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

app = typer.Typer(help="Offline batch embedding and indexing on ragged, graph-replayed engines.",
                  no_args_is_help=True, add_completion=False)


class OutputDtype(str, Enum):
    float32 = "float32"
    float16 = "float16"
    int8 = "int8"
    binary = "binary"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


@app.callback()
def _group():
    """Offline batch embedding and indexing on ragged, graph-replayed engines."""


MODEL = typer.Option("minilm", "--model", "-m", help="Short name (minilm) or a local model folder.")
DIM = typer.Option(None, "--dim", help="Matryoshka truncation to this many dimensions.")
DTYPE = typer.Option(OutputDtype.float32, "--dtype", help="Output dtype (int8: round(tanh(x)*127); binary: packed bits).")
PROMPT = typer.Option(None, "--prompt", help="Literal prompt prepended to every text.")
PROMPT_NAME = typer.Option(None, "--prompt-name", help="A prompt named in the model's sentence-transformers config.")
DEVICE = typer.Option(Device.auto, "--device", help="auto: CUDA when available, else CPU.")


def engine_config(model: str, dim: Optional[int], dtype: OutputDtype, device: Device):
    from embedpipe.kernels.engine import EngineConfig
    return EngineConfig(model=model, dim=dim, output_dtype=dtype.value, device=device.value)


@app.command()
def embed(texts: list[str] = typer.Argument(..., help="Texts to embed."),
          model: str = MODEL, dim: Optional[int] = DIM, dtype: OutputDtype = DTYPE,
          prompt: Optional[str] = PROMPT, prompt_name: Optional[str] = PROMPT_NAME, device: Device = DEVICE):
    """Print the embedding of each TEXT as a JSON line."""
    from embedpipe.pipeline.commands import run_embed
    run_embed(engine_config(model, dim, dtype, device), texts, prompt, prompt_name)


def main():
    app()


if __name__ == "__main__":
    main()
