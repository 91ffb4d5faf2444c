"""Multiprocess tokenizer pool: chunks of texts in, token ids out, in input order.

Workers are spawned (the parent has torch and CUDA loaded, so no fork) and run only this
module and pipeline.tokenizer, which import numpy and tokenizers, never torch.
"""
from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import threading
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from embedpipe.pipeline.tokenizer import TextTokenizer


class TokenizerPoolError(RuntimeError):
    """A worker died or failed; the pool has been shut down."""


@dataclass
class TokenizedChunk:
    """Token ids of n texts, flat (two small arrays pickle much faster than n lists).

    token_ids: [sum(lengths)] int32, the texts' ids end to end.
    lengths:   [n] int32.
    truncated: [n] bool, whether the text was cut at the tokenizer's max_length.
    """

    token_ids: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def num_truncated(self) -> int:
        return int(self.truncated.sum())

    def sequences(self) -> Iterator[np.ndarray]:
        """Each text's token ids (views into token_ids)."""
        ends = np.cumsum(self.lengths)
        for start, end in zip((ends - self.lengths).tolist(), ends.tolist()):
            yield self.token_ids[start:end]


def encode_chunk(tokenizer: TextTokenizer, texts: Sequence[str]) -> TokenizedChunk:
    """Tokenizes texts in this process."""
    ids, truncated = tokenizer.encode(list(texts))
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
    return TokenizedChunk(flat, lengths, np.asarray(truncated, dtype=np.bool_))


# ---- worker side: runs in the spawned processes ----

def _worker_main(connection: Connection, pickled_tokenizer: bytes) -> None:
    """Tokenizes each list of texts the parent sends, replying a TokenizedChunk or an error string; None ends it."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the pool is the parallelism; no Rayon threads
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C hits the whole group; the parent decides
    exit_when_parent_dies()
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_receive_tasks, args=(connection, tasks), daemon=True).start()
    try:
        tokenizer, load_error = pickle.loads(pickled_tokenizer), None
    except Exception as exc:  # reported by every task, so the parent sees the cause
        tokenizer, load_error = None, f"{type(exc).__name__}: {exc}"
    while (texts := tasks.get()) is not None:
        try:
            if tokenizer is None:
                raise RuntimeError(f"tokenizer failed to load in worker: {load_error}")
            reply: TokenizedChunk | str = encode_chunk(tokenizer, texts)
        except Exception as exc:
            reply = f"{type(exc).__name__}: {exc}"
        connection.send(reply)


def _receive_tasks(connection: Connection, tasks: queue.SimpleQueue) -> None:
    """Reads tasks as they come, so the parent's send never waits for this worker to finish a chunk."""
    try:
        while True:
            tasks.put(connection.recv())
    except (EOFError, OSError):  # the parent is gone
        tasks.put(None)


def exit_when_parent_dies() -> None:
    """A parent killed without running close (SIGTERM, SIGKILL) must not leave workers behind."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_on_sentinel, args=(parent.sentinel,), daemon=True).start()


def _exit_on_sentinel(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


# ---- parent side ----

def exit_description(exitcode: int) -> str:
    """How a process ended: 'exit code 1', or 'exit code -9, SIGKILL' when a signal ended it."""
    return f"exit code {exitcode}, {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exit code {exitcode}"


class _Worker:
    """A worker process, the parent's end of its socket, and its replies not yet handed out."""

    def __init__(self, context, pickled_tokenizer: bytes):
        self.connection, child_end = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child_end, pickled_tokenizer), daemon=True)
        self.process.start()
        child_end.close()  # the worker holds the only other end: its death is EOF here
        self.num_sent = 0  # tasks sent and not yet handed out
        self.replies: deque[TokenizedChunk | str] = deque()  # received, oldest first

    def death(self) -> str:
        self.process.join(timeout=5)
        code = self.process.exitcode
        return "still running, its socket closed" if code is None else exit_description(code)


class TokenizerPool:
    """Tokenizes chunks of texts in worker processes; use as a context manager.

    num_workers=0 tokenizes in the calling process (same interface, for tests and debugging).
    At most max_pending chunks (default 2 * workers + 2) are in flight at once. Each worker has a
    socket of its own (no shared queue or lock a dying worker could leave half-written), and
    the parent watches every worker's exit while it waits, so a death stops `map` at once.
    """

    def __init__(self, tokenizer: TextTokenizer, num_workers: int | None = None, max_pending: int | None = None):
        self.num_workers = max(1, (os.cpu_count() or 2) - 1) if num_workers is None else num_workers
        self.max_pending = 2 * self.num_workers + 2 if max_pending is None else max_pending
        if self.num_workers < 0 or self.max_pending < 1:
            raise ValueError("num_workers must be >= 0 and max_pending >= 1")
        self.num_texts = 0
        self.num_truncated = 0
        self._tokenizer = tokenizer
        self._workers: list[_Worker] = []  # started by start() or the first map
        self._closed = False

    def __enter__(self) -> TokenizerPool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._abort()  # an error or Ctrl-C: don't wait for busy workers

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the live workers (started by start() or the first map)."""
        return [w.process.pid for w in self._workers if w.process.is_alive()]

    def close(self) -> None:
        """Ends idle workers and terminates busy ones (nobody will read their chunks)."""
        self._closed = True
        for worker in self._workers:
            try:
                worker.connection.send(None)
            except OSError:  # already dead
                pass
            if worker.num_sent:
                worker.process.terminate()
        self._reap()

    def map(self, chunks: Iterable[tuple[Any, Sequence[str]]]) -> Iterator[tuple[Any, TokenizedChunk]]:
        """Yields (meta, TokenizedChunk) per (meta, texts) chunk, in input order, reading chunks lazily.

        A map stopped before its end closes the pool.
        """
        if self._closed:
            raise TokenizerPoolError("tokenizer pool is closed")
        results = self._map_in_process(chunks) if not self.num_workers else self._map_in_workers(iter(chunks))
        for meta, chunk in results:
            self.num_texts += len(chunk)
            self.num_truncated += chunk.num_truncated
            yield meta, chunk

    def _map_in_process(self, chunks: Iterable[tuple[Any, Sequence[str]]]) -> Iterator[tuple[Any, TokenizedChunk]]:
        for meta, texts in chunks:
            try:
                chunk = encode_chunk(self._tokenizer, texts)
            except Exception as exc:
                raise TokenizerPoolError(f"tokenizer raised {type(exc).__name__}: {exc}") from exc
            yield meta, chunk

    def start(self) -> TokenizerPool:
        """Starts the workers now rather than at the first map: they import while the caller loads a model."""
        if self.num_workers and not self._workers:
            pickled = pickle.dumps(self._tokenizer)
            context = multiprocessing.get_context("spawn")  # the parent has torch and CUDA loaded: no fork
            self._workers = [_Worker(context, pickled) for _ in range(self.num_workers)]
        return self

    def _map_in_workers(self, chunks: Iterator[tuple[Any, Sequence[str]]]) -> Iterator[tuple[Any, TokenizedChunk]]:
        self.start()
        pending: deque[tuple[Any, _Worker]] = deque()  # sent, not yet handed out; oldest first
        try:
            self._send_up_to_limit(chunks, pending)
            while pending:
                meta, worker = pending.popleft()
                chunk = self._reply_of(worker)
                self._send_up_to_limit(chunks, pending)  # keep workers busy while the caller works
                yield meta, chunk
        finally:
            if pending:  # the caller stopped early, or an error
                self._abort()

    def _send_up_to_limit(self, chunks: Iterator[tuple[Any, Sequence[str]]], pending: deque) -> None:
        while len(pending) < self.max_pending:
            chunk = next(chunks, None)
            if chunk is None:
                return
            meta, texts = chunk
            worker = min(self._workers, key=lambda w: w.num_sent)
            try:
                worker.connection.send(list(texts))
            except OSError as exc:
                raise self._died(worker) from exc
            worker.num_sent += 1
            pending.append((meta, worker))

    def _reply_of(self, worker: _Worker) -> TokenizedChunk:
        """The worker's oldest reply; reads every worker's replies while waiting, so none blocks on a full socket."""
        while not worker.replies:
            self._receive_ready()
        reply = worker.replies.popleft()
        worker.num_sent -= 1
        if isinstance(reply, str):
            raise self._failure(f"tokenizer worker raised {reply}")
        return reply

    def _receive_ready(self) -> None:
        waiting = [w for w in self._workers if w.num_sent > len(w.replies)]
        ready = set(multiprocessing.connection.wait([w.connection for w in waiting]
                                                    + [w.process.sentinel for w in self._workers]))
        for worker in self._workers:
            if worker.process.sentinel in ready:
                raise self._died(worker)
            if worker.connection in ready:
                try:
                    worker.replies.append(worker.connection.recv())
                except (EOFError, OSError) as exc:
                    raise self._died(worker) from exc

    def _died(self, worker: _Worker) -> TokenizerPoolError:
        return self._failure(f"tokenizer worker died ({worker.death()})")

    def _failure(self, message: str) -> TokenizerPoolError:
        """Shuts the pool down and describes what went wrong."""
        self._abort()
        return TokenizerPoolError(message)

    def _abort(self) -> None:
        """Terminates the workers at once."""
        self._closed = True
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.terminate()
        self._reap()

    def _reap(self) -> None:
        """Joins every worker, killing any that outlived shutdown."""
        for worker in self._workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()
