"""The server's engine thread: requests' sequences, first in first out, merged into token-budget batches.

The event loop calls `submit()` (never blocks) and awaits the job's future; other threads call
`submit_with()` and get the result through a callback. `watch(fd, on_readable)` has the engine thread itself read a
file descriptor between batches and while idle: the HTTP front processes' pipes (fronts.py), so that a request from
another process reaches the batcher without a second thread's wake-up (a bridge thread that received it, then
woke this one, took 0.18 ms from the HTTP process's send to this thread's wake-up on the H200's host; reading here
gave 16 clients' query p50 3.39 -> 2.85 ms, one client's unchanged: benchmarks/results/2026-12-04-h200-request-path).
One engine thread owns the Engine: it moves queued sequences into a TokenBudgetBatcher one batch
ahead, so a large request is cut into chunks that share batches with the requests behind it, keeps up to
`max_in_flight` batches in flight (batching/in_flight.py, which also splits a batch that runs out of
memory; 2 by default: the CPU packs and launches batch N+1 while the device runs batch N, TEI's
infer.rs), and completes each job once its last row is back.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import selectors
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np

from embedpipe.kernels.batch import Batch
from embedpipe.pipeline.batching.batcher import BatcherConfig, TokenBudgetBatcher
from embedpipe.pipeline.batching.in_flight import InFlight

MAX_IN_FLIGHT = 2  # the default: the CPU packs and launches batch N+1 while the device runs batch N


class SchedulerClosed(RuntimeError):
    """The scheduler takes no new jobs (the server is shutting down)."""


@dataclass(eq=False)
class Job:
    """One request's sequences (token_types: a type per token of each, for a reranker that takes them; None: none);
    `out` [num_seqs, width] fills in as batches come back.

    `on_done(out or the exception)` runs on the engine thread once, unless the job was cancelled.
    """

    sequences: list[list[int]]
    out: np.ndarray
    on_done: Callable[[np.ndarray | Exception], None]
    future: asyncio.Future | None = None  # for jobs of submit(): on_done settles it in its loop
    submitted: float = field(default_factory=time.perf_counter)
    next_index: int = 0  # the next sequence to move into the batcher
    remaining: int = 0  # rows not yet back
    dispatched: float | None = None  # when its first sequence went into a batch
    finished: float | None = None  # when its last row came back
    cancelled: bool = False
    token_types: list[list[int]] | None = None

    def __post_init__(self):
        self.remaining = len(self.sequences)

    def cancel(self) -> None:
        """Sequences not yet batched are dropped (called from the event loop on timeout)."""
        self.cancelled = True

    @property
    def times(self) -> tuple[float, float]:
        """(queue, inference) seconds of a completed job: submission to its first batch's launch, then to its
        last row back (a request's x-queue-time and x-inference-time)."""
        return self.dispatched - self.submitted, self.finished - self.dispatched


class Scheduler:
    """Owns an Engine on one thread; `submit(sequences)` from the event loop returns a Job to await."""

    def __init__(self, engine, batching: BatcherConfig = BatcherConfig(),
                 on_batch: Callable[[Batch, list[float]], None] | None = None, max_in_flight: int = MAX_IN_FLIGHT,
                 idle_spin_s: float = 0.0):
        self.engine, self.batching = engine, batching
        self.idle_spin_s = idle_spin_s  # after its last batch, the engine thread polls this long before it sleeps
        self._busy_at = 0.0  # when it last launched or read a batch
        self.on_batch = on_batch  # (batch, queue seconds of the jobs it starts), on the engine thread
        self._batcher = TokenBudgetBatcher(batching)
        self._in_flight = InFlight(engine, batching.policy, self._batcher.pad_token_id, describe_sequence,
                                   max_in_flight)
        self._tokens_batched = 0  # real tokens in the batcher
        self._inbox: deque[Job] = deque()
        self._batched: weakref.WeakSet[Job] = weakref.WeakSet()  # jobs with sequences in the batcher or in flight
        # the engine thread waits on these: its wake-up pipe (a byte per submit from another thread) and the watched fds
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._new_watches: deque[tuple[int, Callable[[], bool]]] = deque()
        self._closing = False
        self._close_called = False
        # held while a submit checks _closing and queues its job, and while the engine thread decides it is done
        # with a closed inbox: a submit that passed the check is served, one after it gets SchedulerClosed
        self._inbox_lock = threading.Lock()
        self.failed: BaseException | None = None  # what stopped the engine thread, if anything did
        self._thread = threading.Thread(target=self._run, name="embedpipe-engine", daemon=True)
        self._thread.start()

    def submit(self, sequences: list[list[int]], token_types: list[list[int]] | None = None) -> Job:
        """From the event loop: queues one request's token-id sequences (and their token types, for a reranker
        that takes them); await `job.future` for [len(sequences), width]."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        job = self.submit_with(sequences, partial(settle_in_loop, loop, future), token_types)
        job.future = future
        return job

    def submit_with(self, sequences: list[list[int]], on_done: Callable[[np.ndarray | Exception], None],
                    token_types: list[list[int]] | None = None) -> Job:
        """From any thread: queues the sequences; `on_done` gets [len(sequences), width] or the error."""
        out = np.empty((len(sequences), self.engine.output.width), dtype=self.engine.output.numpy_dtype)
        job = Job(sequences, out, on_done, token_types=token_types)
        with self._inbox_lock:
            if self._closing:
                raise SchedulerClosed(self.failure or "the server is shutting down")
            self._inbox.append(job)
        if threading.get_ident() != self._thread.ident:  # a watched fd's reader, on the engine thread, needs none
            self._wake()
        return job

    def watch(self, fd: int, on_readable: Callable[[], bool]) -> None:
        """From any thread: the engine thread calls `on_readable()` whenever fd is readable (between batches, and as
        soon as it is while idle) until it returns False (fd is done: no longer watched). It runs on the engine
        thread, so it must not block: read what is there, submit, hand slow work to another thread."""
        self._new_watches.append((fd, on_readable))
        self._wake()

    def close(self, timeout: float | None = None) -> None:
        """Takes no new jobs, finishes every queued one, and stops the engine thread."""
        self._closing = self._close_called = True
        self._wake()
        self._thread.join(timeout)
        if not self._thread.is_alive() and self._wake_write >= 0:  # here, not on the engine thread: a submit racing
            fds, self._wake_read, self._wake_write = (self._wake_read, self._wake_write), -1, -1  # its end writes no
            for fd in fds:  # closed (or reused) fd
                os.close(fd)

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"\0")
        except OSError:  # the pipe is full of wake-ups already, or closed (-1) with the engine thread gone
            pass

    def _run(self) -> None:
        try:
            self._serve()
        except BaseException as error:  # a fault outside one batch: every waiting request fails, none waits forever
            with self._inbox_lock:
                self.failed, self._closing = error, True
                waiting = [*self._inbox, *self._batched]
            closed = SchedulerClosed(self.failure)
            for job in waiting:
                if not job.cancelled and job.remaining:
                    job.cancel()
                    job.on_done(closed)
            while self._watching() and not self._close_called:  # later requests get SchedulerClosed from submit
                self._poll(None)
        finally:
            self._selector.close()

    def _watching(self) -> bool:
        return len(self._selector.get_map()) > 1 or bool(self._new_watches)  # more than the wake-up pipe

    @property
    def failure(self) -> str | None:
        """Why the engine thread stopped, if it failed (the server then stops too)."""
        if self.failed is None:
            return None
        return f"the engine thread failed ({type(self.failed).__name__}: {self.failed}); the server stops"

    def _serve(self) -> None:
        in_flight = self._in_flight
        while True:
            while in_flight and in_flight.oldest_done():
                self._read_oldest()
            self._poll(0)
            self._fill()
            batch = self._next_batch() if not in_flight.full else None
            if batch is not None:
                self._launch(batch)
            elif in_flight:
                # every slot busy, or nothing queued to launch: wait for the oldest batch; jobs that come
                # meanwhile are launched as soon as it ends. (Looking for them every 100 us instead
                # measured 0.37 ms more at one client on the H200, BERT-base: 3.05 vs 2.68 ms p50.)
                self._read_oldest()
            elif self._closing and self._inbox_closed():
                return
            else:
                self._idle()

    def _inbox_closed(self) -> bool:
        """With _closing set: nothing queued, and nothing can be queued any more (a submit checks _closing under
        the lock)."""
        with self._inbox_lock:
            return not self._inbox

    def _idle(self) -> None:
        """Nothing to launch or read: polls until idle_spin_s after the last batch (a request that comes meanwhile
        starts on a running thread, without a wake-up), then sleeps until a submit, a close or a watched fd."""
        until = self._busy_at + self.idle_spin_s
        while time.perf_counter() < until:
            if self._poll(0) or self._inbox or self._closing:
                return
        self._poll(None)

    def _poll(self, timeout: float | None) -> bool:
        """Runs the watched fds' readers that have something to read; waits up to `timeout` seconds (None: until a
        submit, a close or a watched fd wakes it). Wake-ups are drained after the wait, and the next pass re-reads
        the inbox, so a submit during this call is not lost. Whether anything was readable."""
        while self._new_watches:
            fd, on_readable = self._new_watches.popleft()
            self._selector.register(fd, selectors.EVENT_READ, on_readable)
        events = self._selector.select(timeout)
        for key, _ in events:
            if key.data is None:
                _drain(key.fd)
            elif key.data() is False:
                self._selector.unregister(key.fd)
        return bool(events)

    def _fill(self) -> None:
        """Moves queued sequences into the batcher until it holds one full batch."""
        batching = self.batching
        while self._tokens_batched < batching.max_batch_tokens and len(self._batcher) < batching.max_batch_seqs:
            job = self._head_job()
            if job is None:
                return
            ids, types = job.sequences[job.next_index], job.token_types
            self._batcher.add(ids, (job, job.next_index), None if types is None else types[job.next_index])
            self._batched.add(job)
            job.next_index += 1
            self._tokens_batched += len(ids)

    def _head_job(self) -> Job | None:
        """The oldest job with sequences left to batch; finished and cancelled ones leave the inbox."""
        while self._inbox:
            job = self._inbox[0]
            if not job.cancelled and job.next_index < len(job.sequences):
                return job
            self._inbox.popleft()
        return None

    def _next_batch(self) -> Batch | None:
        batch = self._batcher.next_batch(flush=True)
        if batch is not None:
            self._tokens_batched -= batch.num_tokens
        return batch

    def _launch(self, batch: Batch) -> None:
        self._busy_at = now = time.perf_counter()
        started = []
        for job, _ in batch.tags:
            if job.dispatched is None:
                job.dispatched = now
                started.append(now - job.submitted)
        try:
            self._in_flight.launch(batch, self._scatter)
        except Exception as error:  # noqa: BLE001 - one bad batch fails its requests, not the server
            self._fail(batch, error)
            return
        if self.on_batch is not None:
            self.on_batch(batch, started)

    def _read_oldest(self) -> None:
        batch = self._in_flight.oldest
        try:
            self._in_flight.read_oldest()
        except Exception as error:  # noqa: BLE001
            self._fail(batch, error)
        self._busy_at = time.perf_counter()

    def _scatter(self, batch: Batch, embeddings) -> None:
        """embeddings [batch.num_seqs, width] (the engine's pinned buffer: copied) into the jobs of batch.tags
        (a batch, or an out-of-memory half of one)."""
        rows = embeddings.numpy()
        for k, (job, i) in enumerate(batch.tags):
            job.out[i] = rows[k]
            job.remaining -= 1
            if job.remaining == 0 and not job.cancelled:
                job.finished = time.perf_counter()
                job.on_done(job.out)

    def _fail(self, batch: Batch, error: Exception) -> None:
        for job in {job for job, _ in batch.tags}:
            if not job.cancelled and job.remaining:  # a job an out-of-memory half completed has its answer
                job.cancel()
                job.on_done(error)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def settle_in_loop(loop: asyncio.AbstractEventLoop, future: asyncio.Future, result) -> None:
    try:
        loop.call_soon_threadsafe(settle, future, result)
    except RuntimeError:
        pass  # the loop is closed: nobody waits for this job any more


def settle(future: asyncio.Future | concurrent.futures.Future, result) -> None:
    """Gives the future its result, or raises `result` in it when it is an exception (once; later calls do nothing)."""
    if future.done():
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)


def describe_sequence(tag: tuple[Job, int]) -> str:
    job, i = tag
    return f"input {i} of a request"
