"""Choices and options shared by several commands."""
from __future__ import annotations

import re
from enum import Enum
from typing import Optional

import typer

from embedpipe.kernels.output_dtypes import OUTPUT_DTYPES


# --dtype's choices: the names of output_dtypes.OUTPUT_DTYPES (numpy only, no torch)
OutputDtype = Enum("OutputDtype", {name: name for name in OUTPUT_DTYPES}, type=str)


class ChunkOn(str, Enum):
    """--chunk-on: where a window ends."""
    token = "token"
    sentence = "sentence"


def check_device(device: str) -> str:
    """--device of every command: auto, cpu, cuda or cuda:N (a one-line usage error otherwise)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        from embedpipe.cli.commands import fail
        fail(f"--device must be auto, cpu, cuda or cuda:N, not {device!r}")
    return device


MODEL = typer.Option("minilm", "--model", "-m", help="Short name (minilm) or a local model folder.")
DIM = typer.Option(None, "--dim", help="Matryoshka truncation to this many dimensions.")
DTYPE = typer.Option(OutputDtype.float32, "--dtype",
                     help="Output dtype (int8: round(tanh(x)*127); binary: packed bits).")
PROMPT = typer.Option(None, "--prompt", help="Literal prompt prepended to every text.")
PROMPT_NAME = typer.Option(None, "--prompt-name", help="A prompt named in the model's sentence-transformers config.")
MAX_LENGTH = typer.Option(None, "--max-length",
                          help="Tokens per text (prompt and special tokens included), below the model's "
                               "max_seq_length; longer texts are cut and counted as truncated.")
CHUNK_TOKENS = typer.Option(
    None, "--chunk-tokens", metavar="N",
    help="Cut each text into windows of at most N tokens (prompt and special tokens included), each embedded on its "
         "own (index: a row with id, chunk, char_start, char_end; embed: a line), instead of cutting the text off at "
         "the max length.")
CHUNK_OVERLAP = typer.Option(
    None, "--chunk-overlap", metavar="M", help="Tokens a window repeats of the one before it (default 0).")
CHUNK_ON = typer.Option(
    None, "--chunk-on",
    help="Where a window ends: token (its last word boundary; the default) or sentence (after its last sentence "
         "end, when it has one).")
LATE_CHUNKING = typer.Option(
    False, "--late-chunking",
    help="With --chunk-tokens: run each text through the model whole (up to the max length; longer texts as "
         "several runs of whole windows) and pool each window's tokens from it, so every window's vector sees "
         "its whole text. Needs a mean or last-token pooling model.")
DEVICE = typer.Option("auto", "--device", callback=check_device,
                      help="auto (CUDA when available, else the CPU), cpu, cuda or cuda:N.")
NPROBE = typer.Option(None, "--nprobe", help="IVF indexes: inverted lists visited per query (default: the one "
                                             "written into the index, chosen for recall@10 >= 0.95).")
EF_SEARCH = typer.Option(None, "--ef-search", help="HNSW indexes: candidates kept per query (default: the one "
                                                   "written into the index, chosen for recall@10 >= 0.95).")


def engine_config(model: str, dim: Optional[int], dtype: OutputDtype, device: str):
    """The EngineConfig of the options; a value it refuses (--dim 0) is a one-line usage error, exit 2."""
    from embedpipe.cli.commands import fail
    from embedpipe.kernels.engine import EngineConfig
    try:
        return EngineConfig(model=model, dim=dim, output_dtype=dtype.value, device=device)
    except ValueError as error:
        fail(str(error))
