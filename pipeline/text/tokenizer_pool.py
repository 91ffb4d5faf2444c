"""Multiprocess tokenizer pool: tasks in, their replies out, in input order.

A task is any picklable object with `run(tokenizer) -> Iterator[reply]`: the index job's task
(reader.ReadAndTokenize) reads a piece of a unit itself and replies its tokenized chunks, so the
parent sends a few bytes per piece and gets back flat arrays. Workers are spawned (the parent has
torch and CUDA loaded, so no fork) and import numpy, pyarrow and tokenizers, never torch.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import threading
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, Iterable, Iterator, Protocol

from embedpipe.pipeline.errors import JobFault
from embedpipe.pipeline.text.tokenizer import TextTokenizer
from embedpipe.pipeline.util.processes import exit_description, exit_when_parent_dies

CREDIT = "credit"  # parent -> worker: one more reply may be sent


class TokenizerPoolError(JobFault, RuntimeError):
    """A worker died or failed; the pool has been shut down."""


class Task(Protocol):
    def run(self, tokenizer: TextTokenizer) -> Iterator[Any]: ...


# ---- worker side: runs in the spawned processes ----

def _worker_main(connection: Connection, pickled_tokenizer: bytes, max_unread: int) -> None:
    """Runs each task the parent sends, replying ("reply", r) per result and ("done", None) at its end,
    or ("error", message); None ends it. At most max_unread replies are sent before the parent's credits."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the pool is the parallelism; no Rayon threads
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C hits the whole group; the parent decides
    exit_when_parent_dies()
    tasks: queue.SimpleQueue = queue.SimpleQueue()
    credits = threading.Semaphore(max_unread)
    threading.Thread(target=_receive_tasks, args=(connection, tasks, credits), daemon=True).start()
    try:
        tokenizer, load_error = pickle.loads(pickled_tokenizer), None
    except Exception as exc:  # reported by every task, so the parent sees the cause
        tokenizer, load_error = None, f"{type(exc).__name__}: {exc}"
    while (task := tasks.get()) is not None:
        try:
            if tokenizer is None:
                raise RuntimeError(f"tokenizer failed to load in worker: {load_error}")
            _send_replies(connection, task.run(tokenizer), credits)
            connection.send(("done", None))
        except Exception as exc:
            connection.send(("error", f"{type(exc).__name__}: {exc}"))


def _send_replies(connection: Connection, replies: Iterator[Any], credits: threading.Semaphore) -> None:
    """Makes each reply only once a credit allows sending it: a worker holds no reply it cannot send."""
    while True:
        credits.acquire()
        try:
            reply = next(replies)
        except StopIteration:
            credits.release()
            return
        connection.send(("reply", reply))


def _receive_tasks(connection: Connection, tasks: queue.SimpleQueue, credits: threading.Semaphore) -> None:
    """Reads tasks and credits as they come, so the parent's send never waits for this worker."""
    try:
        while True:
            message = connection.recv()
            if message == CREDIT:
                credits.release()
            else:
                tasks.put(message)
    except (EOFError, OSError):  # the parent closed its end without a None: nobody reads our replies
        os._exit(0)


# ---- parent side ----

class _Worker:
    """A worker process, the parent's end of its socket, and its replies not yet handed out."""

    def __init__(self, context, pickled_tokenizer: bytes, max_unread: int):
        self.connection, child_end = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child_end, pickled_tokenizer, max_unread),
                                       daemon=True)
        self.process.start()
        child_end.close()  # the worker holds the only other end: its death is EOF here
        self.num_sent = 0  # tasks sent whose "done" has not been handed out
        self.num_unfinished = 0  # tasks sent whose "done" (or error) has not been received
        self.messages: deque[tuple[str, Any]] = deque()  # received, oldest first

    def death(self) -> str:
        self.process.join(timeout=5)
        code = self.process.exitcode
        return "still running, its socket closed" if code is None else exit_description(code)


class TokenizerPool:
    """Runs tasks in tokenizer worker processes; use as a context manager.

    num_workers=0 runs them in the calling process (same interface, for the CPU and for debugging).
    At most max_pending tasks (default 8 per worker) are in flight at once, and a worker sends at most
    max_unread replies ahead of the caller (a JSONL file is one task of many replies). Replies come
    back in input order, so a worker that has finished its tasks while the oldest one is still being
    worked on gets the next ones: on the H200's 15 workers, 2 tasks each left them idle 28% of the
    time (tokenize: 1.9 M tokens/s, against 3.4 M for the same tokenizer unordered). Each
    worker has a socket of its own (no shared queue or lock a dying worker could leave half-written),
    and the parent watches every worker's exit while it waits, so a death stops `map` at once.
    """

    def __init__(self, tokenizer: TextTokenizer, num_workers: int | None = None, max_pending: int | None = None,
                 max_unread: int = 24):
        self.num_workers = max(1, (os.cpu_count() or 2) - 1) if num_workers is None else num_workers
        self.max_pending = 8 * self.num_workers + 2 if max_pending is None else max_pending
        if self.num_workers < 0 or self.max_pending < 1 or max_unread < 1:
            raise ValueError("num_workers must be >= 0, max_pending and max_unread >= 1")
        self.max_unread = max_unread
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

    def close(self, wait: bool = True) -> None:
        """Ends idle workers and terminates busy ones (nobody will read their replies); with wait,
        joins them (without, they exit meanwhile and a later close or the pool's exit joins them)."""
        if not self._closed:
            self._closed = True
            for worker in self._workers:
                try:
                    worker.connection.send(None)
                except OSError:  # already dead
                    pass
                if worker.num_sent:
                    worker.process.terminate()
        if wait:
            self._reap()

    def map(self, tasks: Iterable[tuple[Any, Task]]) -> Iterator[tuple[Any, Any]]:
        """Yields (meta, reply) for each reply of each (meta, task), in input order, reading tasks lazily.

        A map stopped before its end closes the pool.
        """
        if self._closed:
            raise TokenizerPoolError("tokenizer pool is closed")
        return self._map_in_process(tasks) if not self.num_workers else self._map_in_workers(iter(tasks))

    def _map_in_process(self, tasks: Iterable[tuple[Any, Task]]) -> Iterator[tuple[Any, Any]]:
        for meta, task in tasks:
            replies = task.run(self._tokenizer)
            while True:
                try:
                    reply = next(replies)
                except StopIteration:
                    break
                except Exception as exc:
                    raise TokenizerPoolError(f"tokenizer raised {type(exc).__name__}: {exc}") from exc
                yield meta, reply

    def start(self) -> TokenizerPool:
        """Starts the workers now rather than at the first map: they import while the caller loads a model."""
        if self.num_workers and not self._workers:
            pickled = pickle.dumps(self._tokenizer)
            context = multiprocessing.get_context("spawn")  # the parent has torch and CUDA loaded: no fork
            self._workers = [_Worker(context, pickled, self.max_unread) for _ in range(self.num_workers)]
        return self

    def _map_in_workers(self, tasks: Iterator[tuple[Any, Task]]) -> Iterator[tuple[Any, Any]]:
        self.start()
        pending: deque[tuple[Any, _Worker]] = deque()  # sent, not yet done; oldest first
        try:
            self._send_up_to_limit(tasks, pending)
            while pending:
                meta, worker = pending[0]
                kind, payload = self._message_of(worker)
                if kind == "done":
                    pending.popleft()
                    worker.num_sent -= 1
                    self._send_up_to_limit(tasks, pending)  # keep workers busy while the caller works
                    continue
                self._send(worker, CREDIT)
                yield meta, payload
        finally:
            if pending:  # the caller stopped early, or an error
                self._abort()

    def _send_up_to_limit(self, tasks: Iterator[tuple[Any, Task]], pending: deque) -> None:
        while len(pending) < self.max_pending:
            item = next(tasks, None)
            if item is None:
                return
            meta, task = item
            # the least loaded by work still to do: a worker whose replies wait behind a slower one's is free
            worker = min(self._workers, key=lambda w: w.num_unfinished)
            self._send(worker, task)
            worker.num_sent += 1
            worker.num_unfinished += 1
            pending.append((meta, worker))

    def _send(self, worker: _Worker, message: Any) -> None:
        try:
            worker.connection.send(message)
        except OSError as exc:
            raise self._died(worker) from exc

    def _message_of(self, worker: _Worker) -> tuple[str, Any]:
        """The worker's oldest message; reads every worker's messages while waiting, so none blocks on a full socket."""
        while not worker.messages:
            self._receive_ready()
        kind, payload = worker.messages.popleft()
        if kind == "error":
            raise self._failure(f"tokenizer worker raised {payload}")
        return kind, payload

    def _receive_ready(self) -> None:
        waiting = [w for w in self._workers if w.num_sent]
        ready = set(multiprocessing.connection.wait([w.connection for w in waiting]
                                                    + [w.process.sentinel for w in self._workers]))
        for worker in self._workers:
            if worker.process.sentinel in ready:
                raise self._died(worker)
            if worker.connection in ready:
                try:
                    message = worker.connection.recv()
                except (EOFError, OSError) as exc:
                    raise self._died(worker) from exc
                worker.messages.append(message)
                worker.num_unfinished -= message[0] != "reply"

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
