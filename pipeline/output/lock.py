"""The lock that keeps two runs from writing one OUTPUT folder at once.

A whole job holds OUTPUT/.embedpipe.lock exclusively. A shard (--shard-index I --num-shards N)
holds it shared, plus OUTPUT/.embedpipe.lock.shard-I-of-N exclusively: shards of one job may
share an OUTPUT, a shard may not run twice, and a whole job excludes them all. `verify` holds it
shared, so no job starts writing while it reads; `merge` holds its outputs' shared and its index
folder's exclusively. The locks are flock()s, which the kernel
drops when the process ends however it ends, so a killed job never leaves a stale lock; the
lock files themselves stay (deleting a lock file races with a process opening it).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".embedpipe.lock"


class OutputLocked(Exception):
    """Another process holds the OUTPUT folder's lock."""


@contextlib.contextmanager
def output_lock(output: Path, exclusive: bool = True, shard: tuple[int, int] | None = None) -> Iterator[None]:
    """Holds OUTPUT's lock (exclusive, or shared plus the exclusive lock of `shard` = (index, count))."""
    with contextlib.ExitStack() as held:
        held.callback(os.close, _take(output / LOCK_FILE, exclusive and shard is None))
        if shard is not None:
            held.callback(os.close, _take(output / f"{LOCK_FILE}.shard-{shard[0]}-of-{shard[1]}", True))
        yield


def _take(path: Path, exclusive: bool) -> int:
    """An open descriptor of `path` holding its flock; the lock ends when it is closed."""
    access = os.O_RDWR if exclusive else os.O_RDONLY  # a shared holder reads it only: a read-only OUTPUT is fine
    fd = os.open(path, access | os.O_CREAT | os.O_CLOEXEC, 0o666)  # less the umask, as open() does
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise OutputLocked(f"{path.parent} is being written by another run ({holder}); wait until it ends or "
                           f"use another output folder (the lock, {path}, ends with that process)") from None
    if exclusive:  # who holds it, for the message of the next one to try
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    return fd


def _holder(fd: int) -> str:
    """Who holds the lock: shared holders are shards; an exclusive holder wrote its pid into the file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return "shards of a sharded job"  # the lock we failed to get was exclusive, and only shared holders exist
    except BlockingIOError:
        return os.pread(fd, 200, 0).decode(errors="replace") or "a process that is still starting"
