"""`index --devices`: one engine process per device, all pulling units from one shared queue.

Each process (device_worker.py) builds its own engine and tokenizer pool (before the job lists its
units, as the in-process engine is built) and takes the next unit
whenever its reader needs one, so a slower device simply ends up with fewer units. The processes
write unit files and manifest records exactly as a single engine does; writers never share a file
(each unit has its own, written under a unique temporary name and renamed into place). The parent
feeds the queue, shows progress and watches the processes: an error or a dead process stops the
others and fails the job (completed units are kept, so running the command again resumes).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import time
from typing import TYPE_CHECKING

import torch

from embedpipe.pipeline.config import ConfigError, DeviceSpec, JobConfig
from embedpipe.pipeline.scale.device_worker import EnginePlan, engine_process
from embedpipe.pipeline.errors import JobFault
from embedpipe.pipeline.util.progress import Progress
from embedpipe.pipeline.index.report import EngineReport
from embedpipe.pipeline.util.processes import exit_description

if TYPE_CHECKING:
    from embedpipe.pipeline.index.plan import PreparedJob

POLL_S = 0.2  # the parent looks for dead processes before each event, and this often without events
LAST_EVENTS_S = 1.0  # a process that exited has flushed its events: wait this long for them
STOP_S = 30.0  # after this, a process that does not stop is killed


class EngineProcessError(JobFault, RuntimeError):
    """An engine process died or failed unexpectedly; the other engines have been stopped."""


def local_devices(spec: DeviceSpec) -> list[str]:
    """Torch device names of the engines: ["cuda:0", "cuda:1"] or ["cpu", "cpu"]."""
    if spec.kind == "cpu":
        return ["cpu"] * spec.count
    available = torch.cuda.device_count()
    if not available:
        raise ConfigError("devices: no CUDA device is visible on this machine; "
                          "--devices cpu:N runs N engine processes on the CPU")
    indices = spec.indices or range(spec.count or available)
    beyond = [index for index in indices if index >= available]
    if beyond:
        raise ConfigError(f"devices: CUDA device {beyond[0]} does not exist here ({available} visible: "
                          f"0 to {available - 1})")
    return [f"cuda:{index}" for index in indices]


def engine_plans(job: JobConfig, devices: list[str]) -> list[EnginePlan]:
    """CPU engines share the cores among their torch threads and tokenize in their own process;
    GPU engines keep a core each and share the others among their tokenizer workers."""
    cores, count = os.cpu_count() or 1, len(devices)
    if devices[0] == "cpu":
        return [EnginePlan(i, device, job.num_workers or 0, max(1, cores // count)) for i, device in enumerate(devices)]
    workers = job.num_workers if job.num_workers is not None else max(1, (cores - count) // count)
    return [EnginePlan(i, device, workers) for i, device in enumerate(devices)]


class DeviceEngines:
    """The Embedder of `--devices`: engine processes fed from one queue of units; a context manager.

    Entering starts the processes and waits until each has started its tokenizer workers and
    loaded its engine (the in-process engine, too, is loaded before the job lists its units and
    starts its clock); `embed` feeds them the units.
    """

    def __init__(self, job: JobConfig):
        self.job = job
        self.plans = engine_plans(job, local_devices(job.devices))
        context = multiprocessing.get_context("spawn")
        self.units, self.events = context.Queue(), context.Queue()
        self.processes = [context.Process(target=engine_process, args=(job, plan, self.units, self.events),
                                          name=f"embedpipe-engine-{plan.device}") for plan in self.plans]
        self.fed = False  # units were queued for them

    def __enter__(self) -> DeviceEngines:
        try:
            for process in self.processes:
                process.start()
            self._wait_until_ready()
        except BaseException as error:
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def _wait_until_ready(self) -> None:
        ready: set[int] = set()
        exited_at: dict[int, float] = {}
        while len(ready) < len(self.processes):
            kind, index, payload = self._next_event(self.processes, self.events, {}, exited_at)
            if kind == "ready":
                ready.add(index)
            elif kind == "failed":
                raise self._failure(index, *payload)

    def __exit__(self, *exc) -> None:
        self.units.cancel_join_thread()  # on a failure, unread units must not keep this process alive
        # processes given no units (nothing pending, or the job failed first) have nothing to finish
        _stop(self.processes, terminate=exc[0] is not None or not self.fed)

    def embed(self, prepared: PreparedJob, progress: Progress) -> list[EngineReport]:
        if not prepared.pending:
            return [EngineReport(plan.device) for plan in self.plans]
        for unit in prepared.pending:
            self.units.put(unit)
        for _ in self.plans:
            self.units.put(None)  # one end marker per process
        self.fed = True
        return self._watch(self.processes, self.events, progress)

    def _watch(self, processes: list, events, progress: Progress) -> list[EngineReport]:
        """Relays progress until every process has reported; raises on the first failure or death."""
        reports: dict[int, EngineReport] = {}
        exited_at: dict[int, float] = {}  # processes seen ended without a report: since when
        while len(reports) < len(processes):
            kind, index, payload = self._next_event(processes, events, reports, exited_at)
            if kind == "progress":
                progress.advance(*payload)
            elif kind == "log":
                progress.log(f"{self.plans[index].device}: {payload}")
            elif kind == "done":
                reports[index] = payload
            else:
                raise self._failure(index, *payload)
        return [reports[plan.index] for plan in self.plans]

    def _next_event(self, processes: list, events, reports: dict, exited_at: dict) -> tuple:
        """The next event; raises once a process has been gone LAST_EVENTS_S without its report.

        Checked before every read: the other engines' progress events must not hide a death.
        """
        while True:
            now = time.monotonic()
            for index, process in enumerate(processes):
                if process.exitcode is None or index in reports:
                    continue
                # it exited: its last events were flushed before it ended, and are read within this wait
                if now - exited_at.setdefault(index, now) > LAST_EVENTS_S:
                    raise EngineProcessError(  # the caller adds that the completed units are kept
                        f"{self._name(index)} died ({exit_description(process.exitcode)}); "
                        "the other engines were stopped")
            try:
                return events.get(timeout=POLL_S)
            except queue.Empty:
                pass

    def _failure(self, index: int, pickled: bytes | None, trace: str) -> Exception:
        """The process's own error when it pickles (an input error keeps its type and exit code)."""
        if pickled is None:
            return EngineProcessError(f"{self._name(index)} failed:\n{trace}")
        error = pickle.loads(pickled)
        error.add_note(f"raised in {self._name(index)}:\n{trace}")
        return error

    def _name(self, index: int) -> str:
        """Which engine: "engine process 1 of 2 (cpu, pid 4242)" (--devices cpu:2 names every device cpu)."""
        return (f"engine process {index} of {len(self.processes)} ({self.plans[index].device}, "
                f"pid {self.processes[index].pid})")


def _stop(processes: list, terminate: bool) -> None:
    """Joins the processes; with terminate, SIGTERMs them first (they remove their open unit files)."""
    for process in processes:
        if terminate and process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is None:
            continue  # never started
        process.join(STOP_S)
        if process.is_alive():
            process.kill()
            process.join()
