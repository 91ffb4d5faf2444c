"""`embedpipe serve --http-workers N`: N HTTP processes in front of the one engine process.

One Python process that parses JSON, tokenises and writes responses is bound by its GIL: on the
H200 it answered at most ~1,200 requests/s of 512 tokens while the device was mostly idle
(benchmarks/serve_request_path.py measures the request path alone). With N > 1 this process
keeps the engine, its scheduler, the index and the metrics, and spawns N HTTP processes: each
runs the same app (app.py) with its own event loop and tokenizer threads, and sends token ids
here over a connection of its own. Each HTTP process listens on a socket of its own bound to the
same port (SO_REUSEPORT): the kernel spreads connections over them (with one shared socket, the
first process to accept took every keep-alive connection). The engine thread reads each HTTP process's
jobs pipe itself (Scheduler.watch: between batches, and at once while idle) and submits its token ids to the one
Scheduler, so every process's requests share the same token-budget batches, and a request reaches the batcher with
one wake-up instead of a bridge thread's and then the engine thread's (scheduler.py says what it changed).

Messages (wire.py: one frame each, no pickling on the request path), HTTP process -> here: EMBED (rid, the time it
was sent, token ids end to end as int32, lengths), CANCEL (rid), and pickled ones: ("listening",) once its socket
accepts connections, ("search", rid, queries, k), ("rerank", rid, token ids, token types), ("metrics", rid),
("metrics_update", *RemoteMetrics.take()) every FLUSH_S. Here -> HTTP process: VECTORS (rid, float32 [n, width],
Job.times), or a pickled (rid, result): the hits, a rerank's (scores [n], Job.times), the metrics text or an
exception. EMBED and CANCEL travel on the jobs pipe, which the engine thread reads; the rest on the control pipe,
which a bridge thread reads; replies on a third (link()), which an HTTP process reads on its event loop.
"""
from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import multiprocessing
import multiprocessing.connection
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from multiprocessing.connection import Connection
from typing import Callable

import numpy as np
import uvicorn

from embedpipe.pipeline.config import ConfigError
from embedpipe.pipeline.errors import JobFault
from embedpipe.pipeline.serve import wire
from embedpipe.pipeline.serve.app import EmbedServer, EngineFailed, LocalBackend, create_app
from embedpipe.pipeline.serve.config import ServeConfig, ServedModel
from embedpipe.pipeline.serve.listen import SWITCH_INTERVAL_S, DrainingUvicorn, bind
from embedpipe.pipeline.serve.scheduler import Job, SchedulerClosed, settle
from embedpipe.pipeline.util.processes import exit_description, exit_when_parent_dies

FLUSH_S = 0.02  # how often an HTTP process sends its metric updates (one message, not three per request)


class HttpProcessDied(JobFault):
    """An HTTP process exited while serving: the others were stopped, the server with them."""


# ---- the engine process ----

class FrontBridge:
    """One HTTP process's messages. Its jobs pipe (embed, cancel) is read on the engine thread as it comes
    (Scheduler.watch); its control pipe (everything else: searches, reranks, metrics) on a thread of its own, so
    that those never wait for a batch to end."""

    def __init__(self, end: tuple[Connection, Connection, Connection], backend: LocalBackend,
                 searches: ThreadPoolExecutor):
        (self.jobs, self.control, self.replies), self.backend, self.searches = end, backend, searches
        self.listening = threading.Event()
        self.jobs_closed = threading.Event()  # the HTTP process is gone: its jobs pipe is no longer read
        self._send_lock = threading.Lock()  # replies come from the engine threads and the search threads
        self._jobs_lock = threading.Lock()
        self._jobs: dict[int, Job] = {}  # embed and rerank requests not yet answered, for "cancel"
        os.set_blocking(self.jobs.fileno(), False)
        self._jobs_reader = wire.FrameReader(self.jobs.fileno())
        backend.scheduler.watch(self.jobs.fileno(), self._read_jobs)
        self.thread = threading.Thread(target=self._read_control, name="embedpipe-http-bridge", daemon=True)
        self.thread.start()

    def close(self, timeout: float) -> None:
        """Once the HTTP process has exited: until both its pipes' readers have seen the end."""
        self.jobs_closed.wait(timeout)
        self.thread.join(timeout)

    def _read_jobs(self) -> bool:
        """On the engine thread, once the jobs pipe is readable: submits or cancels as each message says; False once
        the HTTP process is gone (its unanswered jobs are cancelled)."""
        try:
            frames = self._jobs_reader.read()
        except OSError:
            frames, self._jobs_reader.closed = [], True
        for frame in frames:
            self._serve_message(frame)
        if not self._jobs_reader.closed:
            return True
        with self._jobs_lock:  # a rerank the control thread reads later is not submitted (_handle)
            for job in self._jobs.values():
                job.cancel()
            self.jobs_closed.set()
        return False

    def _read_control(self) -> None:
        try:
            while True:
                self._serve_message(self.control.recv_bytes())
        except (EOFError, OSError):  # the HTTP process is gone
            pass

    def _serve_message(self, frame: bytes) -> None:
        message = ()
        try:
            message = wire.decode(frame)
            self._handle(*message)
        except Exception as error:  # noqa: BLE001 - that request fails (a frame that does not decode: dropped);
            if message[:1] in (("embed",), ("rerank",), ("search",), ("metrics",)):  # this HTTP process goes on
                self._reply(message[1], error)
            else:
                traceback.print_exc()

    def _handle(self, kind: str, *args) -> None:
        if kind == "listening":
            self.listening.set()
        elif kind == "embed":
            rid, sent, sequences = args
            with self._jobs_lock:  # held until the job is listed, so its reply cannot come first
                try:
                    job = self.backend.scheduler.submit_with(sequences, partial(self._embedded, rid))
                    job.submitted = sent  # the queue time counts the hop from the HTTP process
                    self._jobs[rid] = job
                except SchedulerClosed as error:
                    self._reply(rid, error)
        elif kind == "rerank":
            rid, sequences, token_types = args
            with self._jobs_lock:
                if self.jobs_closed.is_set():  # read after the HTTP process had gone: nobody waits for it
                    return
                try:
                    self._jobs[rid] = self.backend.rerank_scheduler.submit_with(
                        sequences, partial(self._reranked, rid), token_types)
                except SchedulerClosed as error:
                    self._reply(rid, error)
        elif kind == "cancel":
            with self._jobs_lock:
                job = self._jobs.pop(args[0], None)
            if job is not None:
                job.cancel()
        elif kind == "search":
            rid, queries, k = args
            self.searches.submit(self._search, rid, queries, k)
        elif kind == "metrics":
            self._reply(args[0], self.backend.metrics.text())
        elif kind == "metrics_update":
            self.backend.metrics.update(*args)
        else:
            raise ValueError(f"unknown message {kind!r} from an HTTP process")

    def _embedded(self, rid: int, result) -> None:
        with self._jobs_lock:
            job = self._jobs.pop(rid, None)
        if job is None:  # cancelled meanwhile: nobody waits for it
            return
        if isinstance(result, Exception):
            self._reply(rid, result)
        else:
            self._send(wire.vectors_message(rid, result, job.times))

    def _reranked(self, rid: int, result) -> None:
        """A rerank's scores [n] float32 and Job.times, pickled (a few floats a document: no frame of their own)."""
        with self._jobs_lock:
            job = self._jobs.pop(rid, None)
        if job is not None:
            self._reply(rid, result if isinstance(result, Exception) else (result[:, 0].copy(), job.times))

    def _search(self, rid: int, queries: np.ndarray, k: int) -> None:
        try:
            result = self.backend.search(queries, k)
        except Exception as error:  # noqa: BLE001 - the request fails, the server goes on
            result = error
        self._reply(rid, result)

    def _reply(self, rid: int, result) -> None:
        """A reply other than embeddings (hits, metrics text, an error), pickled."""
        if isinstance(result, Exception):
            result = _picklable(result)
        self._send(wire.pickled_message(rid, result))

    def _send(self, frame: bytes) -> None:
        with self._send_lock:
            try:
                self.replies.send_bytes(frame)
            except OSError:
                pass  # the HTTP process is gone; nobody waits for this


def _picklable(error: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - e.g. an exception type with required arguments
        return RuntimeError(f"{type(error).__name__}: {error}")


PIPE_BYTES = 1 << 20  # each side writes without waiting for the reader's next turn


def link(context=multiprocessing) -> tuple[tuple[Connection, Connection, Connection],
                                          tuple[Connection, Connection, Connection]]:
    """Three one-way pipes between the engine process and one HTTP process: (the engine's end: jobs in, control in,
    replies out), (the HTTP process's end: jobs out, control out, replies in). The jobs and replies pipes hold 1 MiB
    (Linux; 64 KiB by default, ~40 MiniLM vectors): the engine thread reads jobs between batches, and the HTTP
    process reads replies on its event loop."""
    jobs_in, jobs_out = context.Pipe(duplex=False)
    control_in, control_out = context.Pipe(duplex=False)
    replies_in, replies_out = context.Pipe(duplex=False)
    for connection in (jobs_out, replies_out):
        try:
            fcntl.fcntl(connection.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        except OSError:  # above the system's pipe-max-size: the default stays
            pass
    return (jobs_in, control_in, replies_out), (jobs_out, control_out, replies_in)


def serve_with_fronts(config: ServeConfig, model: ServedModel, backend: LocalBackend,
                      announce: Callable[[str], None] = lambda line: None) -> None:
    """Runs the HTTP processes until SIGTERM / SIGINT (then drains them, then the engine) or until one dies or
    the engine thread fails (then stops the others, and raises HttpProcessDied or EngineFailed)."""
    listeners = [_listen(config.host, config.port) for _ in range(config.http_workers)]
    backend.start()
    searches = ThreadPoolExecutor(config.tokenizer_threads, thread_name_prefix="embedpipe-search")
    context = multiprocessing.get_context("spawn")  # this process has torch (and CUDA) loaded: no fork
    fronts, bridges = [], []
    stop = threading.Event()

    def on_signal(*_) -> None:  # at once: each HTTP process refuses new requests (503) and finishes its own
        stop.set()
        for process in fronts:
            if process.pid is not None and process.exitcode is None:
                process.terminate()  # one still starting up ends here, by the signal: that is no failure

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    for number in range(config.http_workers):
        if stop.is_set():
            break
        here, there = link(context)
        process = context.Process(target=front_main, args=(config, model, listeners[number], there),
                                  name=f"embedpipe-http-{number}")
        fronts.append(process)
        process.start()
        for connection in there:
            connection.close()
        bridges.append(FrontBridge(here, backend, searches))
    if stop.is_set():  # the signal came while they started: also stop one started after on_signal ran
        on_signal()
    dead, announced = [], False
    while not stop.is_set():
        multiprocessing.connection.wait([p.sentinel for p in fronts], timeout=0.2 if announced else 0.02)
        if stop.is_set():
            break
        dead = [p for p in fronts if p.exitcode is not None]
        if dead or backend.failure is not None:  # one died, or the engine thread: stop the others
            on_signal()
        elif not announced and all(bridge.listening.is_set() for bridge in bridges):
            # each HTTP process holds its socket now: once one closes it, the kernel gives new connections to
            # the others (or refuses them), instead of queueing them here for a reset when this process exits
            for listener in listeners:
                listener.close()
            reranker = "" if model.reranker is None else f", reranker {model.reranker.name}"
            announce(f"serving {model.name} on http://{config.host}:{config.port} ({backend.engine.device}, "
                     f"dimension {model.output.dim}{reranker}, {config.http_workers} HTTP processes)")
            announced = True
    for process in fronts:
        process.join(config.request_timeout + 10)
        if process.is_alive():
            process.kill()
            process.join()
    for bridge in bridges:  # each ends at its pipes' end and cancels what it had left unanswered; a bridge thread
        bridge.close(10)  # still running at interpreter exit would free the engine there (and abort in C++)
    backend.close()
    searches.shutdown()
    for listener in listeners:
        listener.close()
    if backend.failure is not None:
        raise EngineFailed(backend.failure)
    if dead:
        raise HttpProcessDied(f"HTTP process {dead[0].name} exited ({exit_description(dead[0].exitcode)}); "
                              "the server stopped")


def _listen(host: str, port: int) -> socket.socket:
    """A socket for one HTTP process, bound here to the shared port (so a taken port fails at once)."""
    if port == 0:
        raise ConfigError("--port 0 (any free port) needs --http-workers 1: the HTTP processes share one port")
    listener = bind(host, port, share_port=True)
    listener.set_inheritable(True)
    return listener


# ---- an HTTP process ----

class RemoteBackend:
    """The engine process, reached over this process's pipes (link()); LocalBackend's interface."""

    failure = None  # the engine process watches its engine thread and stops every HTTP process

    def __init__(self, end: tuple[Connection, Connection, Connection]):
        self.jobs, self.control, self.replies = end
        self.metrics = RemoteMetrics(self)
        self._ids = itertools.count()
        self._waiting: dict[int, Callable] = {}  # request id -> settle(result)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def start(self) -> None:
        """Replies are read on the event loop as they come (a thread reading them had to wake the loop again), and
        requests are written there, never blocking it (wire.FrameWriter): other threads hand theirs to the loop."""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        os.set_blocking(self.replies.fileno(), False)
        self._reader = wire.FrameReader(self.replies.fileno())
        self._loop.add_reader(self.replies.fileno(), self._receive)
        self._jobs_out = wire.FrameWriter(self.jobs.fileno(), self._loop)
        self._control_out = wire.FrameWriter(self.control.fileno(), self._loop)
        threading.Thread(target=self._flush_metrics, name="embedpipe-metrics", daemon=True).start()

    def close(self) -> None:
        """Sends the last metric updates (on the loop, at its shutdown); the engine process drains its jobs once
        every HTTP process has exited."""
        self.metrics.flush()
        for out in (self._jobs_out, self._control_out):
            out.flush_blocking()

    def _flush_metrics(self) -> None:
        try:
            while True:
                time.sleep(FLUSH_S)
                self.metrics.flush()  # handed to the loop (send): a gone engine process fails there, not here
        except RuntimeError:  # the loop has closed: the process is shutting down
            pass

    def send(self, *message) -> None:
        """A message other than embed and cancel, pickled, on the control pipe; from any thread."""
        frame = wire.pickled_message(*message)
        if threading.get_ident() == self._loop_thread:
            self._control_out.write(frame)
        else:
            self._loop.call_soon_threadsafe(self._control_out.write, frame)

    async def embed(self, sequences: list[list[int]]) -> tuple[np.ndarray, tuple[float, float]]:
        """The embeddings [len(sequences), width] and the (queue, inference) seconds for them: from sending them to
        their first batch's launch (the engine process's clock is this one: perf_counter is CLOCK_MONOTONIC), then
        to the reply's arrival here."""
        rid = next(self._ids)
        future = self._loop.create_future()
        self._waiting[rid] = partial(settle, future)  # on the loop (_receive)
        try:
            sent = time.perf_counter()
            self._jobs_out.write(wire.embed_message(rid, sent, sequences))
            vectors, (queue, _) = await future
            return vectors, (queue, time.perf_counter() - sent - queue)
        finally:
            if self._waiting.pop(rid, None) is not None:  # unanswered (a timeout): drop its unbatched sequences
                self._jobs_out.write(wire.cancel_message(rid))  # after the embed: one pipe, in order

    def call(self, kind: str, *args):
        """A round trip, from a pool thread: the engine process's answer, or its error raised here."""
        rid = next(self._ids)
        answer: Future = Future()
        self._waiting[rid] = partial(settle, answer)
        self.send(kind, rid, *args)
        return answer.result()

    def search(self, queries: np.ndarray, k: int) -> list[list[dict]]:
        return self.call("search", queries, k)

    async def rerank(self, sequences: list[list[int]],
                     token_types: list[list[int]] | None) -> tuple[np.ndarray, tuple[float, float]]:
        """The reranker's scores [len(sequences)] float32 and the engine's (queue, inference) seconds for them."""
        rid = next(self._ids)
        future = self._loop.create_future()
        self._waiting[rid] = partial(settle, future)
        try:
            self.send("rerank", rid, sequences, token_types)
            return await future
        finally:
            if self._waiting.pop(rid, None) is not None:  # unanswered (a timeout): drop its unbatched pairs
                self._control_out.write(wire.cancel_message(rid))  # after the rerank, on its pipe

    def _receive(self) -> None:
        """On the loop, once the replies pipe is readable: settles each request whose reply is complete."""
        try:
            frames = self._reader.read()
        except OSError:
            frames, self._reader.closed = [], True
        for frame in frames:
            message = wire.decode(frame)
            if message[0] == "vectors":  # ("vectors", rid, vectors, times)
                rid, result = message[1], (message[2], message[3])
            else:
                rid, result = message
            answer = self._waiting.pop(rid, None)
            if answer is not None:
                answer(result)
        if self._reader.closed:  # the engine process is gone (this process exits with it)
            self._loop.remove_reader(self.replies.fileno())
            for answer in list(self._waiting.values()):
                answer(SchedulerClosed("the engine process is gone"))


class RemoteMetrics:
    """Metric updates, summed here and sent to the engine process's one registry every FLUSH_S.

    /metrics reads that registry (after sending this process's updates).
    """

    def __init__(self, backend: RemoteBackend):
        self.backend = backend
        self._lock = threading.Lock()  # updates come from the event loop, flushes from a thread
        self._active, self._inputs, self._tokens, self._answered = 0, 0, 0, []

    def admitted(self, change: int) -> None:
        with self._lock:
            self._active += change

    def counted(self, inputs: int, tokens: int) -> None:
        with self._lock:
            self._inputs += inputs
            self._tokens += tokens

    def answered(self, endpoint: str, status: int, seconds: float, phases: tuple[float, ...] | None = None) -> None:
        with self._lock:
            self._answered.append((endpoint, status, seconds, phases))

    def take(self) -> tuple[int, int, int, list]:
        """The updates since the last take: (active change, inputs, tokens, [(endpoint, status, seconds, phases)]),
        phases being the seconds of an answered request's phases (timing.RequestTimes.phases) or None."""
        with self._lock:
            update = self._active, self._inputs, self._tokens, self._answered
            self._active, self._inputs, self._tokens, self._answered = 0, 0, 0, []
        return update

    def flush(self) -> None:
        update = self.take()
        if update != (0, 0, 0, []):
            self.backend.send("metrics_update", *update)

    def text(self) -> bytes:
        self.flush()
        return self.backend.call("metrics")


class FrontUvicorn(DrainingUvicorn):
    """An HTTP process's uvicorn: Ctrl-C reaches the whole process group; only the engine process's SIGTERM stops it."""

    def handle_exit(self, sig, frame) -> None:
        if sig != signal.SIGINT:
            super().handle_exit(sig, frame)


def front_main(config: ServeConfig, model: ServedModel, listener: socket.socket,
               end: tuple[Connection, Connection]) -> None:
    exit_when_parent_dies()
    server = EmbedServer(config, model, RemoteBackend(end))
    uv_config = uvicorn.Config(create_app(server), access_log=False, log_level="warning",
                               timeout_graceful_shutdown=int(config.request_timeout) + 5)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # uvicorn re-raises the SIGTERM after its graceful shutdown, under the handler found at start: exit 0
    signal.signal(signal.SIGTERM, lambda *_: None)
    # once its socket listens: the engine process announces the server when every one does
    FrontUvicorn(uv_config, server, partial(server.backend.send, "listening")).run(sockets=[listener])
