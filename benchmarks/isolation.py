"""Every timed system in a fresh process of its own, in rounds that alternate A B A B A B, summarised per round.

A worker is `python benchmarks/worker.py TASK.json`: it builds its system (`prepare(task)` of the task's suite
module: imports, the model loaded, nothing timed), says `ready`, waits for `go`, warms the GPU to steady clocks
(recorded), runs `measure(state, task)` on the inputs file the task names and writes its samples (JSON) and
vectors (.npz). A suite starts all its workers at once (their start-up is untimed and overlaps) and then lets
them run one at a time in round order, so no timed system shares a process, its threads, its allocator or the
GPU's time with another. Ratios are taken round by round (ours and the peer of the same round), then summarised.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORKER = Path(__file__).resolve().parent / "worker.py"
NOT_FIGURES = {"pid"}
WARM_S = 0.3  # bf16 matmuls before each timed series: the GPU leaves its idle clocks


class OutOfBudget(Exception):
    """The run's --budget-s left too little for the next piece of work; its reason is recorded, not raised further."""


class Deadline:
    """The run's time budget: `left()` seconds remain; `check(need, what)` raises OutOfBudget when fewer than `need`."""

    def __init__(self, seconds: float | None):
        self.end = None if not seconds else time.monotonic() + seconds

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()

    def timeout(self) -> float | None:
        return None if self.end is None else max(1.0, self.left())

    def check(self, need: float, what: str) -> None:
        if self.left() < need:
            raise OutOfBudget(f"{what} skipped: {max(self.left(), 0):.0f} s of the budget left (needs ~{need:.0f} s)")


def warm(device: str) -> dict:
    """Steady clocks before a timed series (CUDA): {"sm_mhz", "max_sm_mhz"} after WARM_S of matmuls; {} on the CPU."""
    if not device.startswith("cuda"):
        return {}
    from common import warm_gpu
    return warm_gpu(WARM_S)


class Worker:
    """One system of one round in its own process (worker.py); the task's JSON and results sit in `folder`."""

    def __init__(self, task: dict, folder: Path, name: str):
        folder.mkdir(parents=True, exist_ok=True)
        self.name, self.task_file, self.log = name, folder / f"{name}.task.json", folder / f"{name}.log"
        self.task_file.write_text(json.dumps({**task, "result": str(folder / f"{name}.result.json"),
                                              "vectors": str(folder / f"{name}.vectors.npz")}))
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, str(WORKER), str(self.task_file)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True, cwd=WORKER.parent)

    def expect(self, line: str, deadline: Deadline) -> None:
        """Waits for the worker's next protocol line (its stdout carries nothing else)."""
        got = _read_line(self.proc, deadline)
        if got != line:
            self.kill()
            tail = self.log.read_text()[-3000:]
            raise RuntimeError(f"worker {self.name} said {got!r}, not {line!r} (exit {self.proc.poll()}):\n{tail}")

    def run(self, deadline: Deadline) -> tuple[dict, dict]:
        """Lets the worker time its series; returns its result (with its pid and clocks) and its vectors."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self.expect("done", deadline)
        self.proc.wait(60)  # gone (os._exit: no interpreter teardown) before the next system is timed
        task = json.loads(self.task_file.read_text())
        with np.load(task["vectors"]) as vectors:
            return json.loads(Path(task["result"]).read_text()), dict(vectors)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def _read_line(proc: subprocess.Popen, deadline: Deadline) -> str:
    import selectors
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(deadline.timeout()):
            raise OutOfBudget("a worker ran past the run's budget and was stopped")
    return proc.stdout.readline().strip()


def start_workers(tasks: list[tuple[str, dict]], folder: Path, deadline: Deadline) -> dict[str, Worker]:
    """Starts every (name, task) at once and waits until each has built its system."""
    workers = {name: Worker(task, folder, name) for name, task in tasks}
    try:
        for worker in workers.values():
            worker.expect("ready", deadline)
    except BaseException:
        stop_workers(workers)
        raise
    return workers


def stop_workers(workers: dict[str, Worker]) -> None:
    for worker in workers.values():
        worker.kill()


def round_robin(systems: list[str], rounds: int, run_one, deadline: Deadline, what: str) -> tuple[dict, str | None]:
    """`run_one(system, round)` for round 0..rounds-1, system after system (A B A B ...); {system: [results]} and,
    if the budget cut the rounds short (after round 0), why. A round starts only if the last one's time is left."""
    results: dict[str, list] = {system: [] for system in systems}
    last_round_s = 0.0
    for r in range(rounds):
        if r:
            try:
                deadline.check(1.2 * last_round_s, f"{what}: round {r + 1} of {rounds}")
            except OutOfBudget as cut:
                return results, str(cut)
        start, this_round = time.perf_counter(), {}
        try:
            for system in systems:
                this_round[system] = run_one(system, r)
        except OutOfBudget as cut:  # a worker outlasted the budget: the whole rounds before it stand
            if not r:
                raise
            return results, f"{what}: round {r + 1} of {rounds} stopped: {cut}"
        for system in systems:
            results[system].append(this_round[system])
        last_round_s = time.perf_counter() - start
    return results, None


def spread(values: list[float]) -> dict:
    """Median and range of one figure over the rounds."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rounds: list[dict]) -> dict:
    """Per-round dicts of figures -> {figure: {median, min, max}} for every number that every round has, plus the
    rounds themselves (`n` is summed: the samples of all rounds)."""
    keys = [k for k, v in rounds[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and k not in NOT_FIGURES and all(isinstance(r.get(k), (int, float)) for r in rounds)]
    out = {k: spread([r[k] for r in rounds]) for k in keys if k != "n"}
    if "n" in keys:
        out["n"] = sum(r["n"] for r in rounds)
    return {**out, "rounds": rounds}


def ratio(ours: list[dict], peer: list[dict], key: str, higher_is_better: bool) -> dict:
    """How many times better ours is, round by round (the same round's ours and peer), summarised."""
    values = [(o[key] / p[key]) if higher_is_better else (p[key] / o[key]) for o, p in zip(ours, peer)]
    return {**spread(values), "rounds": values}


def same_process_check(pids: dict[str, list[int]]) -> None:
    """Every timed system ran in a process of its own: no pid twice, none the coordinator's."""
    flat = [pid for values in pids.values() for pid in values]
    if len(set(flat)) != len(flat) or os.getpid() in flat:
        raise RuntimeError(f"timed systems shared a process: {pids}")
