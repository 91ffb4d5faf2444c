"""One engine process of `index --devices`: its own engine and tokenizer pool, units from the shared queue.

Runs in a spawned process (CUDA cannot be forked). Tells the parent, through the events queue,
that its engine is loaded ("ready"), its progress, its log lines, and at the end its EngineReport
or its error.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.queues import Queue
from typing import Callable, Iterable

import torch

from embedpipe.kernels.engine import model_spec

from embedpipe.pipeline.config import JobConfig
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.index.report import EngineReport
from embedpipe.pipeline.index.job import load_engine
from embedpipe.pipeline.index.reader import read_and_tokenize
from embedpipe.pipeline.index.runner import UnitRunner
from embedpipe.pipeline.inputs.sources import WorkUnit
from embedpipe.pipeline.text.tokenizer_pool import TokenizerPool
from embedpipe.pipeline.util.processes import exit_when_parent_dies

PROGRESS_INTERVAL_S = 0.5


@dataclass(frozen=True)
class EnginePlan:
    """What one engine process runs on."""

    index: int  # its place among the job's engines
    device: str  # "cuda:N" or "cpu"
    num_workers: int  # tokenizer processes (0: tokenize in the engine process)
    num_threads: int | None = None  # torch threads of a CPU engine; None: torch's default


class QueueProgress:
    """The runner's Progress, forwarded to the parent: rows and tokens every PROGRESS_INTERVAL_S, log lines."""

    def __init__(self, events: Queue, index: int):
        self.events, self.index = events, index
        self.rows = self.tokens = 0
        self.last_sent = time.monotonic()

    def advance(self, rows: int = 0, tokens: int = 0) -> None:
        self.rows += rows
        self.tokens += tokens
        if time.monotonic() - self.last_sent >= PROGRESS_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self.rows or self.tokens:
            self.events.put(("progress", self.index, (self.rows, self.tokens)))
        self.rows = self.tokens = 0
        self.last_sent = time.monotonic()

    def log(self, message: str) -> None:
        self.events.put(("log", self.index, message))


def engine_process(job: JobConfig, plan: EnginePlan, units: Queue, events: Queue) -> None:
    """The process's main: embeds units from `units` (None ends them) and reports ("done" or "failed")."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent stops us
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # unwinds, so the runner removes its open unit files
    sys.unraisablehook = _sigterm_again
    exit_when_parent_dies()
    progress = QueueProgress(events, plan.index)
    try:
        ready = lambda: events.put(("ready", plan.index, None))
        outcome = ("done", plan.index, embed_units(job, plan, iter(units.get, None), progress, ready))
    except Exception as error:
        outcome = ("failed", plan.index, (_pickled(error), traceback.format_exc()))
    # nothing is left to clean up: a stop from now on just ends the process (raising SystemExit
    # inside the exit's finalizers would print "Exception ignored" tracebacks)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    progress.flush()
    events.put(outcome)
    events.close()
    events.join_thread()  # the outcome is in the pipe
    sys.stdout.flush()
    sys.stderr.flush()
    # everything is written and closed: skip the interpreter's and CUDA's teardown (seconds)
    os._exit(1 if outcome[0] == "failed" else 0)


def embed_units(job: JobConfig, plan: EnginePlan, units: Iterable[WorkUnit], progress: QueueProgress,
                ready: Callable[[], None]) -> EngineReport:
    """Loads the engine (the tokenizer workers start meanwhile), calls `ready`, then embeds the units."""
    if plan.num_threads is not None:
        torch.set_num_threads(plan.num_threads)
    config = replace(job.engine, device=plan.device)
    tokenizer = make_tokenizer(model_spec(config), job.prompt, job.prompt_name, job.max_length)
    with TokenizerPool(tokenizer, plan.num_workers).start() as pool:  # its workers start while the engine loads
        engine = load_engine(config)
        ready()
        runner = UnitRunner(job, engine, progress)
        runner.run(read_and_tokenize(job, pool, units))
    return runner.report()


def _pickled(error: Exception) -> bytes | None:
    """The error as the parent can raise it again; None when it does not survive pickling."""
    try:
        data = pickle.dumps(error)
        pickle.loads(data)
        return data
    except Exception:
        return None


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def _sigterm_again(unraisable) -> None:
    """A SIGTERM that lands while a finalizer runs (a __del__, a weakref callback) raises its SystemExit
    there, where Python prints and swallows it: the process went on, with a traceback on the job's
    stderr. The signal is sent again a millisecond later, from a timer thread, so that it lands once
    the finalizer is over, in the worker's own code, and unwinds it."""
    if isinstance(unraisable.exc_value, SystemExit) and unraisable.exc_value.code == 128 + signal.SIGTERM:
        threading.Timer(0.001, os.kill, (os.getpid(), signal.SIGTERM)).start()
    else:
        sys.__unraisablehook__(unraisable)
