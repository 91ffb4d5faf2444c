"""Process helpers shared by the tokenizer workers, the --devices engine processes and the HTTP processes."""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import threading


def exit_when_parent_dies() -> None:
    """A parent killed without running close (SIGTERM, SIGKILL) must not leave workers behind."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_on_sentinel, args=(parent.sentinel,), daemon=True).start()


def _exit_on_sentinel(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def exit_description(exitcode: int) -> str:
    """How a process ended: 'exit code 1', or 'exit code -9, SIGKILL' when a signal ended it."""
    return f"exit code {exitcode}, {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exit code {exitcode}"
