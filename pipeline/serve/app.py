"""`embedpipe serve`: OpenAI-compatible embeddings and index search over HTTP (Starlette + uvicorn), /v1/rerank with
--rerank-model (rerank.py), and TEI's /embed and /info (tei.py); with --api-key, every route but GET /health wants
the key (auth.py). Every answer carries TEI's x-*-time headers (timing.py).

Starlette, not FastAPI on top of it: the requests are parsed and checked here (protocol.py),
and FastAPI's layers (validation, dependency and telemetry middleware) cost a fifth of the
requests/s at 16 clients (benchmarks/serve_request_path.py, null engine, 2-core VM: 1,533 /
1,788 with FastAPI, 1,910 / 2,249 with Starlette, alternating runs).

Threads: the event loop parses requests and writes JSON; a small thread pool tokenises (the
Rust tokenizer releases the GIL, so threads run in parallel without a process pool's pickling
and IPC on every request) and runs FAISS searches; one engine thread (scheduler.py) owns the
Engine. The loop never waits on the device: it awaits futures the engine thread completes.

The app talks to the engine through a backend: LocalBackend (the engine in this process) or,
with --http-workers N > 1, fronts.RemoteBackend in each of N HTTP processes in front of
the one engine process.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from embedpipe.kernels.engine import Engine
from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.errors import JobFault
from embedpipe.pipeline.serve.auth import BearerAuth
from embedpipe.pipeline.serve.config import ServeConfig, ServedModel, default_max_body_bytes, spin_seconds
from embedpipe.pipeline.serve.query import query_prompt_name
from embedpipe.pipeline.serve.metrics import Metrics
from embedpipe.pipeline.serve.protocol import (ApiError, Limits, check_lengths, dumps, embeddings_response,
                                               openai_error, parse_embeddings, parse_search, search_response,
                                               served_name, shorten)
from embedpipe.pipeline.serve.rerank import RerankEndpoint
from embedpipe.pipeline.serve.scheduler import MAX_IN_FLIGHT, Scheduler, SchedulerClosed
from embedpipe.pipeline.serve.tei import embed_response, finish, parse_embed, tei_error, tei_info
from embedpipe.pipeline.serve.timing import RequestTimes, lap
from embedpipe.pipeline.text.tokenizer import TextTokenizer

JSON = "application/json"
OFF_LOOP_VALUES = 1 << 16  # responses with more floats than this are encoded on the thread pool
TOKENIZE_CHUNK_CHARS = 1 << 18  # a request's texts are tokenised in pool tasks of about this many characters
INLINE_TOKENIZE_CHARS = 256  # one text up to this long is tokenised on the event loop (MiniLM's: ~115 us at most)
CLIENT_CLOSED = 499  # the status counted for a request whose client went away (nginx's)


class ClientGone(Exception):
    """The client disconnected before its answer was ready; its work was cancelled."""


class EngineFailed(JobFault):
    """The engine thread stopped on an unexpected error: its requests got 503 and the server stopped."""


class LocalBackend:
    """The engine (on its scheduler's thread), the index and the metrics, in this process; with a reranker, its
    engine on a second scheduler's thread (its pairs batched as the embeddings' sequences are)."""

    def __init__(self, engine: Engine, index, batching: BatcherConfig, max_in_flight: int = MAX_IN_FLIGHT,
                 reranker: Engine | None = None, idle_spin_s: float = 0.0):
        self.engine, self.index, self.batching, self.max_in_flight = engine, index, batching, max_in_flight
        self.reranker, self.idle_spin_s = reranker, idle_spin_s
        self.metrics = Metrics(engine, reranker)
        self.scheduler: Scheduler | None = None
        self.rerank_scheduler: Scheduler | None = None

    def start(self) -> None:
        self.scheduler = Scheduler(self.engine, self.batching, self.metrics.batches.on_batch, self.max_in_flight,
                                   self.idle_spin_s)
        if self.reranker is not None:
            self.rerank_scheduler = Scheduler(self.reranker, self.batching, self.metrics.rerank_batches.on_batch,
                                              self.max_in_flight)  # no spin: its requests come by a thread's wake-up

    def close(self) -> None:
        """Finishes every queued job and stops the engine threads."""
        for scheduler in (self.scheduler, self.rerank_scheduler):
            if scheduler is not None:
                scheduler.close()

    @property
    def failure(self) -> str | None:
        """Why an engine thread stopped, if one failed (the server then stops too)."""
        failures = [s.failure for s in (self.scheduler, self.rerank_scheduler) if s is not None and s.failure]
        return failures[0] if failures else None

    async def embed(self, sequences: list[list[int]]) -> tuple[np.ndarray, tuple[float, float]]:
        """The embeddings [len(sequences), width] and the engine's (queue, inference) seconds for them."""
        job = self.scheduler.submit(sequences)
        try:
            return await job.future, job.times
        finally:
            job.cancel()  # on a timeout, its sequences not yet batched are dropped

    async def rerank(self, sequences: list[list[int]],
                     token_types: list[list[int]] | None) -> tuple[np.ndarray, tuple[float, float]]:
        """The reranker's scores [len(sequences)] float32 of the pairs, and the engine's (queue, inference) seconds."""
        job = self.rerank_scheduler.submit(sequences, token_types)
        try:
            return (await job.future)[:, 0], job.times
        finally:
            job.cancel()

    def search(self, queries: np.ndarray, k: int) -> list[list[dict]]:
        return self.index.search(queries, k)


def local_server(config: ServeConfig, engine: Engine, index=None, reranker: Engine | None = None) -> EmbedServer:
    """The app's state around an engine (and a reranker's, task "score") in this process."""
    backend = LocalBackend(engine, index, config.batching, config.max_in_flight, reranker,
                           spin_seconds(config, str(engine.device)))
    return EmbedServer(config, ServedModel.of(config, engine, index, reranker), backend)


class EmbedServer:
    """The app's state: the backend (engine, index, metrics), tokenizers and limits."""

    def __init__(self, config: ServeConfig, model: ServedModel, backend):
        self.config, self.model, self.backend = config, model, backend
        folder = model.folder
        max_tokens = config.max_input_tokens or folder.max_seq_length
        if max_tokens > folder.max_seq_length:
            raise ValueError(f"max_input_tokens {max_tokens} is more than the model's max_seq_length "
                             f"{folder.max_seq_length}")
        self.limits = Limits(config.max_inputs, max_tokens, config.truncate, model.output.dim,
                             int(folder.config.get("vocab_size", 1 << 31)))
        self.max_body_bytes = config.max_body_bytes or default_max_body_bytes(config.max_inputs, max_tokens)
        names = [None, *folder.prompts]  # None: the model's default prompt, as `embedpipe embed`
        self.tokenizers = {name: TextTokenizer(folder.tokenizer_file, max_tokens, folder.prompt(name))
                           for name in names}
        self.query_tokenizer = self.tokenizers[query_prompt_name(folder, None, None)]
        self.metrics = backend.metrics
        self.pool = ThreadPoolExecutor(config.tokenizer_threads, thread_name_prefix="embedpipe-tokenize")
        self.reranker = None if model.reranker is None else RerankEndpoint(model.reranker, self.limits, self.pool,
                                                                           self.metrics)
        self.active = 0
        self.draining = False

    @asynccontextmanager
    async def lifespan(self, app: Starlette):
        self.backend.start()
        yield
        self.draining = True
        await asyncio.get_running_loop().run_in_executor(None, self.backend.close)
        self.pool.shutdown()

    async def handle(self, endpoint: str, request: Request, work, errors=openai_error) -> Response:
        """Runs `work(body, times) -> bytes` within the queue limit and the timeout; every error becomes JSON
        (errors(error) -> (status, body): OpenAI's shape or TEI's). An answer carries its phases' times."""
        start, times = time.perf_counter(), RequestTimes()
        try:
            status, body = 200, await self._admit(request, work, times)
        except ApiError as error:
            status, body = errors(error)
        except ClientGone:  # nobody reads this answer
            status, body = CLIENT_CLOSED, b""
        total = time.perf_counter() - start
        answered = status == 200
        self.metrics.answered(endpoint, status, total, times.phases() if answered else None)
        return Response(body, status, times.headers(total) if answered else None, media_type=JSON)

    async def _admit(self, request: Request, work, times: RequestTimes) -> bytes:
        if self.draining:
            raise ApiError(503, "the server is shutting down", kind="unavailable_error")
        if self.active >= self.config.max_queue:
            raise ApiError(429, f"the queue is full ({self.config.max_queue} requests); retry later",
                           kind="rate_limit_error")
        self.active += 1
        self.metrics.admitted(1)
        try:
            async with asyncio.timeout(self.config.request_timeout):  # no task of its own, as wait_for made
                return await self._run(request, work, times)
        except asyncio.TimeoutError:
            raise ApiError(504, f"the request took longer than {self.config.request_timeout:g} s",
                           kind="timeout_error") from None
        except SchedulerClosed as error:
            raise ApiError(503, str(error), kind="unavailable_error") from None
        except (ApiError, ClientGone):
            raise
        except Exception as error:  # noqa: BLE001 - the engine failed this request; the server goes on
            raise ApiError(500, f"{type(error).__name__}: {error}", kind="server_error") from None
        finally:
            self.active -= 1
            self.metrics.admitted(-1)

    async def _run(self, request: Request, work, times: RequestTimes) -> bytes:
        """work(body, times), cancelled (its queued sequences dropped) as soon as the client disconnects. It runs in
        this task, not one of its own: a task and asyncio.wait cost two more turns of the loop per request."""
        body = await self._read_body(request)
        this, working, went = asyncio.current_task(), [True], [False]

        def client_went(_) -> None:  # a later turn of the loop: the work may have ended meanwhile
            if working[0]:
                went[0] = True
                this.cancel()

        gone = asyncio.ensure_future(_disconnected(request))
        gone.add_done_callback(client_went)
        try:
            return await work(body, times)
        except asyncio.CancelledError:
            if went[0]:  # client_went cancelled it: not the timeout, not a shutdown
                this.uncancel()
                raise ClientGone() from None
            raise
        finally:  # also on the timeout, which cancels this coroutine
            working[0] = False
            gone.cancel()

    async def _read_body(self, request: Request) -> bytes:
        limit = self.max_body_bytes
        too_large = ApiError(413, f"the request body is larger than {limit} bytes (the server's --max-body-bytes)",
                             kind="invalid_request_error")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise too_large  # before reading any of it
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
        except ClientDisconnect:
            raise ClientGone() from None
        return b"".join(chunks)

    async def embeddings(self, body: bytes, times: RequestTimes) -> bytes:
        start = time.perf_counter()
        req = parse_embeddings(body, self.limits)
        name = served_name(req.model, self.model.names)
        tokenizer = self._tokenizer(req.prompt_name) if req.texts is not None else None
        times.parse = time.perf_counter() - start
        vectors = await self._embed(req.texts, req.token_ids, req.truncate, tokenizer, times)
        start = time.perf_counter()
        vectors = shorten(vectors, req.dimensions, self.model.output.normalize)
        body = await self._encode(embeddings_response, vectors, req.encoding_format, name, times.num_tokens)
        times.encode = time.perf_counter() - start
        return body

    async def search(self, body: bytes, times: RequestTimes) -> bytes:
        if self.model.index_meta is None:
            raise ApiError(404, "this server has no index; start it with --index OUTPUT", kind="not_found_error")
        start = time.perf_counter()
        req = parse_search(body, self.limits)
        name = served_name(req.model, self.model.names)
        times.parse = time.perf_counter() - start
        vectors = await self._embed(req.queries, None, req.truncate, self.query_tokenizer, times)
        start = time.perf_counter()
        queries = index_queries(vectors, self.model.index_meta, self.model.output.normalize)
        hits = await asyncio.get_running_loop().run_in_executor(self.pool, self.backend.search, queries, req.k)
        times.search, start = lap(start)
        body = search_response(hits, name, times.num_tokens)
        times.encode = time.perf_counter() - start
        return body

    async def rerank(self, body: bytes, times: RequestTimes) -> bytes:
        """POST /v1/rerank (rerank.py)."""
        if self.reranker is None:
            raise ApiError(404, "this server has no reranker; start it with --rerank-model M", kind="not_found_error")
        return await self.reranker.answer(body, times, self.backend)

    async def tei_embed(self, body: bytes, times: RequestTimes) -> bytes:
        """TEI's POST /embed (tei.py): its request, a JSON array of vectors, TEI's errors."""
        start = time.perf_counter()
        req = parse_embed(body, self.limits, self.model.output.normalize)
        tokenizer = self._tokenizer(req.prompt_name)
        times.parse = time.perf_counter() - start
        vectors = await self._embed(req.texts, None, req.truncate, tokenizer, times)
        start = time.perf_counter()
        vectors = finish(vectors, req.dimensions, req.normalize, self.model.output.normalize)
        body = await self._encode(embed_response, vectors)
        times.encode = time.perf_counter() - start
        return body

    async def _embed(self, texts: list[str] | None, token_ids: list[list[int]] | None, truncate: bool,
                     tokenizer: TextTokenizer | None, times: RequestTimes) -> np.ndarray:
        """Embeddings [n, dim] of the texts (tokenised) or the token-id lists (cut to the limit); times gets the
        tokenize, queue and inference seconds and the tokens and characters counted."""
        start = time.perf_counter()
        if texts is not None:
            sequences = await self._tokenize(texts, truncate, tokenizer)
            times.num_chars = sum(map(len, texts))
        else:
            sequences = self._cut(token_ids, truncate)
            times.num_chars = sum(map(len, token_ids))  # TEI counts an id list's ids as its characters
        times.tokenize = time.perf_counter() - start
        vectors, (times.queue, times.inference) = await self.backend.embed(sequences)
        times.num_tokens = self._count(sequences)
        return vectors

    async def _encode(self, encode, vectors: np.ndarray, *args) -> bytes:
        """encode(vectors, *args): on the thread pool for a large response, so that the loop goes on meanwhile."""
        if vectors.size > OFF_LOOP_VALUES:
            return await asyncio.get_running_loop().run_in_executor(self.pool, encode, vectors, *args)
        return encode(vectors, *args)

    def _tokenizer(self, prompt_name: str | None) -> TextTokenizer:
        if prompt_name not in self.tokenizers:
            raise ApiError(400, f"the model has no prompt named {prompt_name!r}; it has: "
                                f"{sorted(n for n in self.tokenizers if n) or 'none'}", "prompt_name")
        return self.tokenizers[prompt_name]

    async def _tokenize(self, texts: list[str], truncate: bool, tokenizer: TextTokenizer) -> list[list[int]]:
        """Token ids of the texts, tokenised on the pool in tasks of ~TOKENIZE_CHUNK_CHARS characters, one after the
        other: a cancelled request stops after the running task, and one request takes one thread at a time. One short
        text (a query) is tokenised here, on the loop: the hop to a pool thread and back cost more than the encoding
        (a 12-word query, 2-core VM: 28 us to encode, 78 us through the pool)."""
        if len(texts) == 1 and len(texts[0]) <= INLINE_TOKENIZE_CHARS:
            ids, truncated = tokenizer.encode(texts)
        else:
            loop, ids, truncated = asyncio.get_running_loop(), [], []
            for chunk in chunks_of_chars(texts, TOKENIZE_CHUNK_CHARS, tokenizer.max_text_chars):
                chunk_ids, chunk_truncated = await loop.run_in_executor(self.pool, tokenizer.encode, chunk)
                ids += chunk_ids
                truncated += chunk_truncated
        if not truncate:
            check_lengths([len(s) for s in ids], truncated, self.limits.max_input_tokens)
        return ids

    def _cut(self, token_ids: list[list[int]], truncate: bool) -> list[list[int]]:
        limit = self.limits.max_input_tokens
        if not truncate:
            check_lengths([len(s) for s in token_ids], [False] * len(token_ids), limit)
        return [ids[:limit] for ids in token_ids]

    def _count(self, sequences: list[list[int]]) -> int:
        num_tokens = sum(len(s) for s in sequences)
        self.metrics.counted(len(sequences), num_tokens)
        return num_tokens

    def health(self) -> Response:
        if self.backend.failure is not None:
            return Response(dumps({"status": "failed", "error": self.backend.failure}), 503, media_type=JSON)
        if self.draining:
            return Response(dumps({"status": "draining"}), 503, media_type=JSON)
        index_rows = (self.model.index_meta or {}).get("num_rows")
        status = {"status": "ok", "model": self.model.name, **self._dimensions(),
                  "max_input_tokens": self.limits.max_input_tokens, "index_rows": index_rows}
        if self.reranker is not None:  # the key only with a reranker: the embedding-only answer stays as it was
            status["rerank_model"] = self.reranker.names[0]
        return Response(dumps(status), media_type=JSON)

    def _dimensions(self) -> dict:
        """The width of /v1/embeddings' vectors (the model's output) and, with an index, the index's dimension
        (/v1/search shortens its queries to it; binary: bits)."""
        meta = self.model.index_meta or {}
        return {"dimensions": self.limits.dim, "index_dimensions": meta.get("dimension")}

    def models(self) -> Response:
        """OpenAI's model list: one entry per served name (--served-model-name's, then the model's own)."""
        data = [{"id": name, "object": "model", "owned_by": "embedpipe", **self._dimensions()}
                for name in self.model.names]
        if self.reranker is not None:
            data += [{"id": name, "object": "model", "owned_by": "embedpipe", "task": "rerank",
                      "max_input_tokens": self.reranker.tokenizer.max_length} for name in self.reranker.names]
        return Response(dumps({"object": "list", "data": data}), media_type=JSON)

    def tei_info(self) -> Response:
        return Response(tei_info(self.model, self.config, self.limits.max_input_tokens), media_type=JSON)


async def _disconnected(request: Request) -> None:
    """Returns when the client disconnects (the body is read: uvicorn's next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def chunks_of_chars(texts: list[str], chunk_chars: int, max_text_chars: int):
    """texts in consecutive lists of about chunk_chars characters (a text counts at most max_text_chars: no more
    of it is read)."""
    start, size = 0, 0
    for i, text in enumerate(texts):
        size += min(len(text), max_text_chars)
        if size >= chunk_chars:
            yield texts[start:i + 1]
            start, size = i + 1, 0
    if start < len(texts):
        yield texts[start:]


def create_app(server: EmbedServer) -> Starlette:
    async def embeddings(request: Request) -> Response:
        return await server.handle("embeddings", request, server.embeddings)

    async def search(request: Request) -> Response:
        return await server.handle("search", request, server.search)

    async def rerank(request: Request) -> Response:
        return await server.handle("rerank", request, server.rerank)

    async def embed(request: Request) -> Response:
        return await server.handle("embed", request, server.tei_embed, tei_error)

    async def models(request: Request) -> Response:
        return server.models()

    async def info(request: Request) -> Response:
        return server.tei_info()

    async def health(request: Request) -> Response:
        return server.health()

    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST
        text = await asyncio.get_running_loop().run_in_executor(server.pool, server.metrics.text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    async def no_route(request: Request, error: HTTPException) -> Response:
        message = (f"{request.method} {request.url.path} is not an endpoint of this server" if error.status_code == 404
                   else f"{request.url.path} does not take {request.method}")
        return Response(ApiError(error.status_code, message).body(), error.status_code, media_type=JSON)

    auth = [] if server.config.api_key is None else [Middleware(BearerAuth, config=server.config)]
    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]),
                             Route("/v1/search", search, methods=["POST"]),
                             Route("/v1/rerank", rerank, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"]),
                             Route("/embed", embed, methods=["POST"]),  # TEI's
                             Route("/info", info, methods=["GET"]),  # TEI's
                             Route("/health", health, methods=["GET"]),
                             Route("/metrics", metrics, methods=["GET"])],
                     middleware=auth, exception_handlers={404: no_route, 405: no_route}, lifespan=server.lifespan)


def index_queries(vectors: np.ndarray, meta: dict, normalize: bool) -> np.ndarray:
    """Query embeddings [q, dim] in the index's form: shortened to its dimension, quantised like its vectors."""
    vectors = shorten(vectors, meta["dimension"], normalize)  # binary: dimension counts bits
    return output_dtype(meta["dtype"]).quantise(vectors)
