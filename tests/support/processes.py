"""Helpers for tests that run `embedpipe index` as a process and stop it: start, wait, check what it left."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

from support.corpus import index_command
from embedpipe.pipeline.output.manifest import completed_units

# The tiny model's attention runs one small SDPA call per text and layer; on a shared 2-core
# machine those calls are about 40 times faster on one thread than on two.
FAST_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # reparented, not yet reaped
    except psutil.NoSuchProcess:
        return True


def wait_until_gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not all(gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_fast(*args, timeout: float = 300, command: str = "index") -> subprocess.CompletedProcess:
    return subprocess.run(index_command(*args, command=command), capture_output=True, text=True, timeout=timeout,
                          env=FAST_ENV)


def start_index(*args, command: str = "index") -> psutil.Popen:
    """`embedpipe index ARGS` (or another command) in a session of its own, so a signal to its process group
    reaches no test. It gets Ctrl-C as a terminal's foreground job does, however the tests were started: run
    from a script's background (`cmd &`), this process ignores SIGINT, and a child inherits an ignored signal,
    so the job would run on through the Ctrl-C a test sends it."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return psutil.Popen(index_command(*args, command=command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=FAST_ENV)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def num_records(output: Path) -> int:
    manifest = output / "manifest"
    return len([name for name in os.listdir(manifest) if not name.startswith(".")]) if manifest.is_dir() else 0


def wait_for_units(process: psutil.Popen, output: Path, num_done: int, timeout: float = 120) -> None:
    """Returns once `num_done` units of OUTPUT are recorded; fails if the process ends first."""
    deadline = time.monotonic() + timeout
    while num_records(output) < num_done:
        assert process.poll() is None, f"index ended before {num_done} units were done: {process.stderr.read()}"
        assert time.monotonic() < deadline, f"no {num_done} units done in {timeout} s"
        time.sleep(0.02)


def spawned_children(pid: int) -> list[psutil.Process]:
    """The processes `pid` started with multiprocessing's spawn (workers, engines; not its resource tracker)."""
    return [child for child in psutil.Process(pid).children() if "spawn_main" in " ".join(child.cmdline())]


def assert_consistent(output: Path, folder: str = "embeddings") -> dict:
    """Each completion record's file is in place with the recorded rows, no other unit file is there
    (a partial one at its final name), and no temporary file is left. folder: a tokenize job's is tokens."""
    done = completed_units(output, folder)
    assert len(done) == num_records(output), "a record without its file"
    for record in done.values():
        assert pq.read_metadata(output / folder / record["file_name"]).num_rows == record["num_rows"]
    visible = {path.name for path in (output / folder).glob("[!.]*")}
    assert visible == {record["file_name"] for record in done.values()}, "a unit file without its record"
    left = [str(path) for path in output.rglob(".*.tmp-*")]
    assert not left, f"temporary files left: {left}"
    return done
