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
import signal
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
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

_worker_tokenizer: TextTokenizer | None = None
_worker_load_error: str | None = None


def _init_worker(pickled_tokenizer: bytes) -> None:
    """Pool initializer: one tokenizer per worker, single-threaded, deaf to Ctrl-C."""
    global _worker_tokenizer, _worker_load_error
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the pool is the parallelism; no Rayon threads
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C hits the whole group; the parent decides
    exit_when_parent_dies()
    try:
        _worker_tokenizer = pickle.loads(pickled_tokenizer)
    except Exception as exc:  # reported by every task, so the parent sees the cause
        _worker_load_error = f"{type(exc).__name__}: {exc}"


def exit_when_parent_dies() -> None:
    """A parent killed without running close (SIGTERM, SIGKILL) must not leave workers behind."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_on_sentinel, args=(parent.sentinel,), daemon=True).start()


def _exit_on_sentinel(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def _tokenize_in_worker(texts: Sequence[str]) -> TokenizedChunk:
    if _worker_tokenizer is None:
        raise RuntimeError(f"tokenizer failed to load in worker: {_worker_load_error}")
    return encode_chunk(_worker_tokenizer, texts)


# ---- parent side ----

def exit_description(exitcode: int) -> str:
    """How a process ended: 'exit code 1', or 'exit code -9, SIGKILL' when a signal ended it."""
    return f"exit code {exitcode}, {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exit code {exitcode}"


class _TrackingContext:
    """A spawn context that remembers the processes it starts.

    ProcessPoolExecutor (3.11) exposes neither its workers' exit codes nor a way to terminate
    them; the pool needs both to name a dead worker's cause and to leave no orphans.
    """

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self.processes: list[multiprocessing.process.BaseProcess] = []

    def Process(self, *args, **kwargs):  # noqa: N802 (multiprocessing's name)
        process = self._context.Process(*args, **kwargs)
        self.processes.append(process)
        return process

    def __getattr__(self, name: str):
        return getattr(self._context, name)


class TokenizerPool:
    """Tokenizes chunks of texts in worker processes; use as a context manager.

    num_workers=0 tokenizes in the calling process (same interface, for tests and debugging).
    At most max_pending chunks (default 2 * workers + 2) are in flight at once.
    """

    def __init__(self, tokenizer: TextTokenizer, num_workers: int | None = None, max_pending: int | None = None):
        self.num_workers = max(1, (os.cpu_count() or 2) - 1) if num_workers is None else num_workers
        self.max_pending = 2 * self.num_workers + 2 if max_pending is None else max_pending
        if self.num_workers < 0 or self.max_pending < 1:
            raise ValueError("num_workers must be >= 0 and max_pending >= 1")
        self.num_texts = 0
        self.num_truncated = 0
        self._tokenizer = tokenizer
        self._context = _TrackingContext()
        self._executor: ProcessPoolExecutor | None = None
        if self.num_workers:
            self._executor = ProcessPoolExecutor(self.num_workers, mp_context=self._context,
                                                 initializer=_init_worker, initargs=(pickle.dumps(tokenizer),))
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
        """Pids of the live workers (started lazily, on the first chunks)."""
        return [p.pid for p in self._context.processes if p.is_alive()]

    def close(self) -> None:
        """Lets the workers finish their current chunk and exit."""
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        self._reap()

    def map(self, chunks: Iterable[tuple[Any, Sequence[str]]]) -> Iterator[tuple[Any, TokenizedChunk]]:
        """Yields (meta, TokenizedChunk) per (meta, texts) chunk, in input order, reading chunks lazily."""
        if self._closed:
            raise TokenizerPoolError("tokenizer pool is closed")
        results = self._map_in_process(chunks) if self._executor is None else self._map_in_workers(iter(chunks))
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

    def _map_in_workers(self, chunks: Iterator[tuple[Any, Sequence[str]]]) -> Iterator[tuple[Any, TokenizedChunk]]:
        pending: deque[tuple[Any, Future]] = deque()  # submitted, not yet handed out; oldest first
        try:
            self._submit_up_to_limit(chunks, pending)
            while pending:
                meta, future = pending.popleft()
                chunk = self._result(future)
                self._submit_up_to_limit(chunks, pending)  # keep workers busy while the caller works
                yield meta, chunk
        finally:  # the caller stopped early, or an error: drop the chunks nobody will read
            for _, future in pending:
                future.cancel()

    def _submit_up_to_limit(self, chunks: Iterator[tuple[Any, Sequence[str]]], pending: deque) -> None:
        while len(pending) < self.max_pending:
            chunk = next(chunks, None)
            if chunk is None:
                return
            meta, texts = chunk
            try:
                pending.append((meta, self._executor.submit(_tokenize_in_worker, texts)))
            except BrokenProcessPool as exc:
                raise self._failure(exc) from exc

    def _result(self, future: Future) -> TokenizedChunk:
        try:
            return future.result()
        except Exception as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: Exception) -> TokenizerPoolError:
        """Shuts the pool down and describes what went wrong."""
        self._abort()  # after it every worker is reaped, so every exit code is known
        if isinstance(exc, BrokenProcessPool):
            return TokenizerPoolError(f"tokenizer worker died ({self._dead_worker_cause()})")
        return TokenizerPoolError(f"tokenizer worker raised {type(exc).__name__}: {exc}")

    def _dead_worker_cause(self) -> str:
        codes = [p.exitcode for p in self._context.processes if p.exitcode not in (None, 0)]
        # the survivors were SIGTERMed after one died; the culprit is the one that wasn't
        culprits = [code for code in codes if code != -signal.SIGTERM] or codes
        return exit_description(culprits[0]) if culprits else "exit code unknown"

    def _abort(self) -> None:
        """Terminates the workers at once; the executor then fails whatever was pending."""
        self._closed = True
        for process in self._context.processes:
            if process.is_alive():
                process.terminate()
        self.close()

    def _reap(self) -> None:
        """Joins every worker, killing any that outlived shutdown."""
        for process in self._context.processes:
            if process.is_alive():  # also reaps the dead; False for one whose start failed
                process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
