"""`embedpipe serve`: options -> ServeConfig. Registered on the app in cli/main.py."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from embedpipe.cli.options import DEVICE, EF_SEARCH, MODEL, NPROBE

API_KEY_ENV = "EMBEDPIPE_API_KEY"  # read when --api-key is not given (a key in the command line shows in `ps`)


def serve(model: str = MODEL,
          index: Optional[Path] = typer.Option(None, "--index", help="An index folder to search (/v1/search)."),
          nprobe: Optional[int] = NPROBE, ef_search: Optional[int] = EF_SEARCH,
          host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
          port: int = typer.Option(8080, "--port", help="Port to listen on."),
          device: str = DEVICE,
          max_inputs: int = typer.Option(2048, "--max-inputs", help="Most inputs (texts or token lists) per request."),
          max_input_tokens: Optional[int] = typer.Option(
              None, "--max-input-tokens", help="Most tokens per input (default: the model's max_seq_length)."),
          truncate: bool = typer.Option(
              True, "--truncate/--no-truncate",
              help="Cut longer inputs to --max-input-tokens, or reject them (400); "
                   "a request's \"truncate\" overrides."),
          max_queue: int = typer.Option(512, "--max-queue",
                                         help="Requests queued or running at once, per HTTP process; more get 429."),
          request_timeout: float = typer.Option(30.0, "--request-timeout", help="Seconds per request; then 504."),
          max_body_bytes: Optional[int] = typer.Option(
              None, "--max-body-bytes",
              help="Larger request bodies get 413 (default: room for --max-inputs texts of --max-input-tokens "
                   "tokens at 16 bytes a token, from 1 MiB to 64 MiB)."),
          max_batch_tokens: int = typer.Option(16384, "--max-batch-tokens", help="Padded tokens per engine batch."),
          tokenizer_threads: int = typer.Option(4, "--tokenizer-threads",
                                                help="Threads that tokenise requests, per HTTP process."),
          http_workers: int = typer.Option(
              1, "--http-workers",
              help="HTTP processes in front of the one engine process (1: HTTP in the engine process). "
                   "One process answers up to ~1-2k requests/s; give a busy GPU server more."),
          max_in_flight: int = typer.Option(
              2, "--max-in-flight",
              help="Engine batches queued on the device at once: 2 packs the next batch while the device runs "
                   "one; 1 lets more requests gather into each batch."),
          idle_spin_us: Optional[int] = typer.Option(
              None, "--idle-spin-us", metavar="US",
              help="Microseconds the engine thread polls for requests after its last batch before it sleeps: a "
                   "request that comes meanwhile starts without a wake-up, at the cost of a busy core while "
                   "traffic flows. Default: 1000 with --http-workers > 1 on a GPU, else 0."),
          api_key: Optional[str] = typer.Option(
              None, "--api-key", metavar="KEY", show_default=False,
              help=f"Require the header Authorization: Bearer KEY on every route but GET /health (401 without "
                   f"it). Default: ${API_KEY_ENV}, which keeps the key out of the process list; neither: open."),
          served_model_name: Optional[list[str]] = typer.Option(
              None, "--served-model-name", metavar="NAME",
              help="Another name the model answers to as a request's \"model\" (repeatable); the first is the one "
                   "responses carry when a request names none. The model's own name stays accepted."),
          rerank_model: Optional[str] = typer.Option(
              None, "--rerank-model", metavar="M",
              help="Also serve POST /v1/rerank with this reranker folder (a BERT / XLM-R cross-encoder or "
                   "Qwen3-Reranker), on its own engine next to --model's; at most --max-inputs documents a request.")):
    """Serve OpenAI-compatible /v1/embeddings (and /v1/search with --index, /v1/rerank with --rerank-model), and
    TEI's /embed, over HTTP."""
    from embedpipe.kernels.engine import EngineConfig
    from embedpipe.pipeline.batching.batcher import BatcherConfig
    from embedpipe.cli.commands import USER_ERRORS, fail
    from embedpipe.pipeline.errors import JobFault
    try:
        from embedpipe.pipeline.serve.config import ServeConfig
        from embedpipe.pipeline.serve.launch import run_server
    except ImportError as e:
        fail(f"{e.name} is missing; install the server extra: pip install 'embedpipe[serve]'")
    api_key = os.environ.get(API_KEY_ENV) if api_key is None else api_key
    try:
        config = ServeConfig(engine=EngineConfig(model=model, device=device), index=index, nprobe=nprobe,
                             ef_search=ef_search, host=host, port=port,
                             max_inputs=max_inputs, max_input_tokens=max_input_tokens, truncate=truncate,
                             max_queue=max_queue, request_timeout=request_timeout, max_body_bytes=max_body_bytes,
                             batching=BatcherConfig(max_batch_tokens=max_batch_tokens),
                             tokenizer_threads=tokenizer_threads, http_workers=http_workers,
                             max_in_flight=max_in_flight, idle_spin_us=idle_spin_us, api_key=api_key,
                             served_model_names=tuple(served_model_name or ()),
                             rerank=None if rerank_model is None else EngineConfig(model=rerank_model, device=device,
                                                                                   task="score"))
    except ValueError as e:
        fail(str(e))
    try:
        run_server(config, lambda line: print(f"embedpipe: {line}", file=sys.stderr, flush=True))
    except USER_ERRORS as e:  # a model or index that cannot be loaded, a port that cannot be listened on
        fail(str(e))
    except JobFault as e:  # an HTTP process died, or the engine thread
        fail(str(e), 1)
