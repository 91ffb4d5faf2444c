"""Helpers for the server tests: a server in a subprocess or in a thread, reached over loopback HTTP."""
from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa

from embedpipe.pipeline.output.faiss_index import build_index
from embedpipe.pipeline.output.manifest import mark_done
from embedpipe.pipeline.output.sinks import UnitWriter
from embedpipe.pipeline.inputs.sources import WorkUnit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`embedpipe serve` as a user runs it; the log goes to a file (a full pipe would stall the server)."""

    def __init__(self, log: Path, *args: str, env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "embedpipe.cli.main", "serve", "--port", str(self.port), "--device", "cpu",
                   *args]
        # env: variables set on top of this process's, less an API key the test run may have (the server stays open)
        env = {**{k: v for k, v in os.environ.items() if k != "EMBEDPIPE_API_KEY"}, **(env or {})}
        with open(log, "w") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:  # and announced: once listening (with --http-workers N, once every HTTP process listens)
                healthy = httpx.get(self.url + "/health", timeout=2).status_code == 200
                if healthy and "embedpipe: serving" in self.log.read_text():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server was not healthy after {timeout} s:\n{self.log.read_text()}")

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


class InProcessServer:
    """uvicorn on a thread of this process, around an EmbedServer the test can reach into."""

    def __init__(self, server):
        import uvicorn
        from embedpipe.pipeline.serve.app import create_app
        self.server, self.port = server, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(server), host="127.0.0.1", port=self.port, log_level="warning")
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.uvicorn.should_exit = True
        self.thread.join(30)


class GatedEngine:
    """The real engine, whose step() waits for the test to open the gate and records each batch's tags."""

    def __init__(self, engine, fail_token: int | None = None):
        self.engine, self.fail_token = engine, fail_token
        self.gate = threading.Event()
        self.batches: list[list[tuple]] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self, batch):
        self.gate.wait()
        self.batches.append(list(batch.tags))
        if self.fail_token is not None and self.fail_token in batch.input_ids.tolist():
            raise RuntimeError("injected engine failure")
        return self.engine.step(batch)


def write_index(folder, ids, titles, doc_vectors, model="minilm"):
    """An index over one unit of float32 vectors with a string id `doc` and a kept `title` column."""
    unit = WorkUnit("docs#0", "/in/docs.parquet", "parquet", 0, 1, "docs")
    with UnitWriter(folder / "out", unit.unit_id, doc_vectors.shape[1], "float32", pa.field("doc", pa.string()),
                    [pa.field("title", pa.string())]) as writer:
        writer.write(pa.array(ids), doc_vectors, [pa.array(titles)])
    mark_done(folder / "out", unit, len(ids), 0, writer.path.name)
    build_index([folder / "out"], folder / "index", extra_meta={"model": model})
    return folder / "index"


def embed(url: str, client=httpx, **payload) -> httpx.Response:
    return client.post(url + "/v1/embeddings", json=payload, timeout=120)


def vectors(response: httpx.Response) -> np.ndarray:
    """[n, dim] float32 from an embeddings response, float or base64."""
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [d["index"] for d in data] == list(range(len(data)))
    rows = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") if isinstance(d["embedding"], str)
            else np.asarray(d["embedding"], dtype=np.float32) for d in data]
    return np.stack(rows)


def metric(url: str, name: str) -> float:
    """The value of one unlabelled (or first labelled) sample of a metric, 0 when absent."""
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0

