"""One timed system in a fresh process, started by isolation.Worker: `python benchmarks/worker.py TASK.json`.

stdout carries the protocol alone (`ready`, then `done` after the coordinator's `go`); anything else that the
libraries print goes to stderr, the worker's log. The task names its suite module, whose `prepare(task)` builds
the system and whose `measure(state, task)` returns (figures, {name: vectors}).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    task = json.loads(Path(sys.argv[1]).read_text())
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints, Python's or a library's C code's, go to the log
    module = importlib.import_module(task["module"])
    state = module.prepare(task)
    protocol.write("ready\n")
    if sys.stdin.readline().strip() != "go":
        return
    import numpy as np

    from isolation import warm
    from common import gpu_clocks
    clocks_before = warm(task["device"])
    result, vectors = module.measure(state, task)
    clocks_after = gpu_clocks() if task["device"].startswith("cuda") else {}
    np.savez(task["vectors"], **vectors)
    Path(task["result"]).write_text(json.dumps({"pid": os.getpid(), "clocks_before": clocks_before,
                                                "clocks_after": clocks_after, **result}))
    protocol.write("done\n")
    protocol.flush()
    os._exit(0)  # no interpreter teardown while the next system is timed


if __name__ == "__main__":
    main()
