"""Listening: the socket `embedpipe serve` binds, and the uvicorn server that drains on a shutdown signal."""
from __future__ import annotations

import socket
import time
from typing import Callable

import uvicorn

from embedpipe.pipeline.errors import UserError

SWITCH_INTERVAL_S = 5e-4  # the serving processes' GIL switch interval: a thread waiting for the GIL gets it sooner


def bind(host: str, port: int, share_port: bool = False) -> socket.socket:
    """A socket bound to host:port, or a one-line UserError. share_port (SO_REUSEPORT): the HTTP processes of
    --http-workers each bind one; without it a second server on the port fails instead of sharing it."""
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if share_port:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror or error}") from error
    return listener


class DrainingUvicorn(uvicorn.Server):
    """uvicorn, calling `on_listening` once its sockets accept connections. A shutdown signal starts a drain: new
    requests get 503 (not a refused or reset connection) while admitted ones finish, up to the request timeout;
    then uvicorn shuts down. A second signal shuts down at once. A failed engine thread shuts the server down."""

    def __init__(self, config: uvicorn.Config, server, on_listening: Callable[[], None]):
        super().__init__(config)
        self.app_server, self.on_listening = server, on_listening
        self.drain_started: float | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.on_listening()

    def handle_exit(self, sig, frame) -> None:
        if self.drain_started is not None:
            super().handle_exit(sig, frame)
            return
        self.app_server.draining = True
        self.drain_started = time.monotonic()

    async def on_tick(self, counter: int) -> bool:  # every 0.1 s
        server = self.app_server
        if server.backend.failure is not None:
            self.should_exit = True
        elif self.drain_started is not None and (
                server.active == 0 or time.monotonic() - self.drain_started > server.config.request_timeout):
            self.should_exit = True
        return await super().on_tick(counter)
