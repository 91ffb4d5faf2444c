"""Starting `embedpipe serve`: load the model and the index, warm up, then serve in this process or
behind HTTP processes (fronts.py) until a signal, and drain."""
from __future__ import annotations

import dataclasses
import signal
import sys
from pathlib import Path
from typing import Callable

import uvicorn

from embedpipe.kernels.engine import Engine
from embedpipe.kernels.models.model_folder import ModelLoadError
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_ids
from embedpipe.pipeline.batching.rerank import score_documents
from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.serve.app import EmbedServer, EngineFailed, create_app, local_server
from embedpipe.pipeline.serve.config import ServeConfig
from embedpipe.pipeline.serve.listen import SWITCH_INTERVAL_S, DrainingUvicorn, bind
from embedpipe.pipeline.serve.fronts import serve_with_fronts
from embedpipe.pipeline.serve.query import load_index as read_index


def load_index(path: Path, engine: Engine, nprobe: int | None = None, ef_search: int | None = None):
    """The index of an `embedpipe index` OUTPUT folder, checked against the served model."""
    index = read_index(path, nprobe, ef_search)
    meta, output = index.meta, engine.output
    same_weights = meta.get("model_fingerprint") == engine.folder.fingerprint  # by another path or id
    if meta.get("model") not in (None, engine.config.model, str(engine.folder.path)) and not same_weights:
        raise ValueError(f"index {path} was made with model {meta['model']}; serve it with --model {meta['model']}")
    for name, served in (("pooling", output.pooling), ("normalize", output.normalize)):
        if meta.get(name, served) != served:
            raise ValueError(f"index {path} was made with {name} {meta[name]}, but the model gives {served}")
    if meta["dimension"] > output.dim:
        raise ValueError(f"index {path} has dimension {meta['dimension']} but the model gives {output.dim}")
    return index


def warm_up(engine: Engine, server: EmbedServer, batching: BatcherConfig, reranker: Engine | None = None) -> None:
    ids, _ = server.tokenizers[None].encode(["warm up"])
    for _ in range(2):  # the second run captures the smallest graph on CUDA
        embed_token_ids(engine, ids, batching)
        if reranker is not None:
            score_documents(reranker, server.reranker.tokenizer, "warm up", ["a document"], batching)


def load_engines(config: ServeConfig) -> tuple[Engine, Engine | None]:
    """The embedding engine and, with config.rerank, the reranker's; each keeps a pinned slot per batch its
    scheduler has in flight (and one more)."""
    engine = Engine(dataclasses.replace(config.engine, max_in_flight=config.max_in_flight))
    if config.rerank is None:
        return engine, None
    return engine, Engine(dataclasses.replace(config.rerank, max_in_flight=config.max_in_flight))


def reranked(config: ServeConfig) -> str:
    """The announcement's words for the reranker, if the server has one."""
    return "" if config.rerank is None else f", reranker {config.rerank.model}"


def run_server(config: ServeConfig, announce: Callable[[str], None] = lambda line: None) -> None:
    """Loads the model (and index), warms up, and serves until SIGTERM / SIGINT, then drains. announce(line)
    is called once the server listens (the CLI prints it). Raises UserError for a model or index that cannot
    be loaded, JobFault when an HTTP process dies or the engine thread fails."""
    # the one HTTP process's port is taken before the model loads: a busy port fails at once, in one line
    listener = bind(config.host, config.port) if config.http_workers == 1 else None
    try:
        engine, reranker = load_engines(config)
        index = load_index(config.index, engine, config.nprobe, config.ef_search) if config.index is not None else None
        server = local_server(config, engine, index, reranker)
    except (ModelLoadError, ValueError, OSError, RuntimeError) as e:  # RuntimeError: torch or FAISS refusing a file
        raise UserError(str(e)) from e
    engine.claim_host_threads()  # this process feeds the engine
    warm_up(engine, server, config.batching, reranker)
    # a thread that wakes (the engine thread, a finished tokenisation) waits for the GIL up to this long
    # while the event loop runs Python: 0.5 ms instead of 5 ms keeps that wait under the latency target
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if config.http_workers > 1:
        serve_with_fronts(config, server.model, server.backend, announce)
        return
    uv_config = uvicorn.Config(create_app(server), host=config.host, port=config.port, access_log=False,
                               timeout_graceful_shutdown=int(config.request_timeout) + 5)
    for sig in (signal.SIGINT, signal.SIGTERM):
        # uvicorn re-raises the signal after a graceful shutdown, under the handler found at start: exit 0
        signal.signal(sig, lambda *_: None)
    port = listener.getsockname()[1]  # --port 0: the one the system chose
    DrainingUvicorn(uv_config, server, lambda: announce(
        f"serving {config.engine.model} on http://{config.host}:{port} "
        f"({engine.device}, dimension {engine.output.dim}{reranked(config)})")).run(sockets=[listener])
    if server.backend.failure is not None:
        raise EngineFailed(server.backend.failure)
