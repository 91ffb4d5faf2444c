"""`embedpipe rerank`: options. Registered on the app in cli/main.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from embedpipe.cli.options import DEVICE

RERANK_MODEL = typer.Option(..., "--model", "-m", show_default=False,
                            help="A reranker folder (or a model id of the local Hugging Face cache): a BERT / XLM-R "
                                 "cross-encoder (*ForSequenceClassification) or Qwen3-Reranker.")
RERANK_MAX_LENGTH = typer.Option(None, "--max-length",
                                 help="Tokens per pair (query, document, special tokens and template), below the "
                                      "model's max_seq_length; longer pairs lose the end of the document.")
INSTRUCTION = typer.Option(None, "--instruction",
                           help="Qwen3-Reranker's task instruction (default: the model card's web-search one).")


def rerank(documents: Optional[list[str]] = typer.Argument(
               None, help="Documents to score; - reads them from standard input."),
           query: str = typer.Option(..., "--query", "-q", show_default=False, help="The query the documents answer."),
           input_file: Optional[Path] = typer.Option(
               None, "--input-file", "-i",
               help="Read the documents from this file (- : standard input): one a line, or with a .jsonl name JSON "
                    "lines with a \"text\" field. Blank lines are skipped."),
           model: str = RERANK_MODEL,
           top: Optional[int] = typer.Option(None, "--top", min=1, help="Print only the best N documents."),
           max_length: Optional[int] = RERANK_MAX_LENGTH,
           truncate: bool = typer.Option(True, "--truncate/--no-truncate",
                                         help="Cut over-long pairs on the document side, or fail (exit 2)."),
           instruction: Optional[str] = INSTRUCTION, device: str = DEVICE):
    """Score each DOCUMENT against --query with a reranker and print JSON lines {"index": i, "score": s}, best first
    (i: the document's position, from 0)."""
    from embedpipe.cli.commands import USER_ERRORS, fail, read_texts
    from embedpipe.pipeline.api import TextReranker

    texts = read_texts(documents, input_file)
    try:
        scored = TextReranker(model, device, max_length, None, instruction).score(query, texts, truncate)
    except USER_ERRORS as error:
        fail(str(error))
    for line in scored.ranked(top):
        print(json.dumps(line))
    if scored.num_truncated:
        print(f"embedpipe: {scored.num_truncated} of {len(texts)} documents were cut to the model's max length",
              file=sys.stderr)
