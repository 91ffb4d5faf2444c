"""The servers of suites 3 and 4: `embedpipe serve` and the peer server (peer_server.py), each its own process.

A Server starts its process on a free loopback port at once; `wait_healthy()` polls /health (and, given
`ready_line`, waits for that line in its log); `stop()` sends SIGTERM and waits.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PEER_SERVER = Path(__file__).resolve().parent / "peer_server.py"
OURS_READY = "embedpipe: serving"  # printed once the server listens (with --http-workers N, every HTTP process)
MODEL_NAME = "bench"  # what the clients ask for; our server answers to it (--served-model-name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess on a free loopback port, started at once (not waiting)."""

    def __init__(self, name: str, command: list[str], log: Path, env: dict | None = None, ready_line: str = ""):
        self.name, self.port, self.log, self.ready_line = name, free_port(), log, ready_line
        with open(log, "w") as out:
            self.proc = subprocess.Popen([*command, "--port", str(self.port)], stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})

    def wait_healthy(self, timeout: float = 240) -> None:
        import urllib.request
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200 and self.ready_line in self.log.read_text():
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise SystemExit(f"{self.name} not healthy after {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def our_server(folder: Path, device: str, *options) -> list[str]:
    """The command of `embedpipe serve` on the model folder, with more options (without --port)."""
    return [sys.executable, "-m", "embedpipe.cli.main", "serve", "--model", str(folder), "--device", device,
            "--served-model-name", MODEL_NAME, *map(str, options)]


def start_servers(folder: Path, device: str, logs: Path, http_workers: int) -> dict[str, Server]:
    """Ours (`--http-workers`) and the peer, both loading at once; wait with `wait_servers`."""
    commands = {"ours": our_server(folder, device, "--http-workers", http_workers),
                "peer": [sys.executable, str(PEER_SERVER), "--model", str(folder), "--device", device]}
    # on a small shared CPU, OpenMP teams that spin while idle (the peer's thread-pool workers each get one)
    # starve each other for hundreds of ms; passive waiting, for both servers, measures the servers instead
    env = {"OMP_WAIT_POLICY": "PASSIVE"} if device == "cpu" else {}
    servers = {}
    try:
        for name, command in commands.items():
            servers[name] = Server(name, command, logs / f"{folder.name}-{name}.log", env,
                                   OURS_READY if name == "ours" else "")
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def wait_servers(servers: dict[str, Server], timeout: float) -> None:
    start = time.monotonic()
    for server in servers.values():
        server.wait_healthy(max(1.0, timeout - (time.monotonic() - start)))


def stop_servers(servers: dict[str, Server]) -> None:
    for server in servers.values():
        server.stop()
