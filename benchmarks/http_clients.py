"""The clients of suites 3 and 4: requests, the throughput client processes, the closed-loop asyncio clients."""
from __future__ import annotations

import asyncio
import base64
import http.client
import json
import multiprocessing
import time

import numpy as np

from common import percentiles
from http_servers import MODEL_NAME


def body(inputs, encoding: str = "base64") -> bytes:
    return json.dumps({"model": MODEL_NAME, "input": inputs, "encoding_format": encoding}).encode()


def post(connection: http.client.HTTPConnection, payload: bytes) -> bytes:
    connection.request("POST", "/v1/embeddings", payload, {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
    return data


def post_once(port: int, payload: bytes) -> bytes:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        return post(connection, payload)
    finally:
        connection.close()


def vectors(data: bytes) -> np.ndarray:
    rows = json.loads(data)["data"]
    return np.stack([np.frombuffer(base64.b64decode(r["embedding"]), dtype=np.float32) for r in rows])


# ---- suite 3: client processes, each a closed loop of `requests` requests per round
def throughput_client(tasks, ready, start, results) -> None:
    """One client process: per task (port, payloads, requests), connects, reports ready, waits for the
    common start, sends its requests back to back and returns (sent, done) times; None ends it."""
    ready.put("started")
    while (task := tasks.get()) is not None:
        port, payloads, requests = task
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        connection.connect()
        ready.put(True)
        start.wait()
        times = []
        for i in range(requests):
            sent = time.perf_counter()
            post(connection, payloads[i % len(payloads)])
            times.append((sent, time.perf_counter()))
        connection.close()
        results.put(times)


class ThroughputClients:
    """`count` client processes, started once (a spawned process pays the parent's imports) and given
    one round of requests per measurement."""

    def __init__(self, count: int):
        context = multiprocessing.get_context("spawn")
        self.tasks = [context.Queue() for _ in range(count)]
        self.ready, self.start, self.results = context.Queue(), context.Event(), context.Queue()
        self.processes = [context.Process(target=throughput_client, args=(tasks, self.ready, self.start, self.results),
                                          daemon=True) for tasks in self.tasks]
        for process in self.processes:
            process.start()

    def wait_started(self, timeout: float) -> None:
        """Until every client process has imported and waits for work (nothing else is timed while they start)."""
        for _ in self.processes:
            self.ready.get(timeout=timeout)

    def round(self, port: int, payloads: list[bytes], requests: int, timeout: float = 300) -> list[tuple[float, float]]:
        for tasks in self.tasks:
            tasks.put((port, payloads, requests))
        for _ in self.tasks:
            self.ready.get(timeout=timeout)
        self.start.set()  # every client is connected and waiting
        times = [t for _ in self.tasks for t in self.results.get(timeout=timeout)]
        self.start.clear()  # each client has passed its wait: the next round waits again
        return times

    def close(self) -> None:
        for tasks in self.tasks:
            tasks.put(None)
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()


def throughput(port: int, clients: ThroughputClients, payloads: list[bytes], sequences: int, tokens: int,
               requests: int, timeout: float = 300) -> dict:
    """Embeddings/s of the client processes, each sending `requests` requests of `sequences` x `tokens`."""
    times = clients.round(port, payloads, requests, timeout)
    elapsed = max(done for _, done in times) - min(sent for sent, _ in times)
    embeddings = len(times) * sequences
    return {"embeddings_per_s": embeddings / elapsed, "tokens_per_s": embeddings * tokens / elapsed,
            "requests": len(times), "seconds": elapsed,
            **{f"request_{k}": v for k, v in percentiles([(d - s) * 1e3 for s, d in times]).items() if k != "n"}}


# ---- suite 4: closed-loop asyncio clients on keep-alive connections (cheap, so the servers are measured)
class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the response (Content-Length only)."""

    async def open(self, port: int) -> Connection:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        return self

    async def post(self, payload: bytes) -> tuple[int, bytes]:
        head = (f"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode()
        self.writer.write(head + payload)
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in header.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return status, await self.reader.readexactly(length)


async def closed_loop(port: int, payloads: list[bytes], clients: int, warmup: float, duration: float) -> dict:
    """`clients` clients, each sending its next request as soon as the last returns: first all together until each
    has had an answer and `warmup` seconds have passed (a batch shape the server meets first runs eagerly, then is
    captured: a first answer can take longer than the warm-up), then timed for `duration` seconds."""
    connections = [await Connection().open(port) for _ in range(clients)]
    latencies_ms, completed, errors, turn = [], [0], [], [0]

    async def send(connection: Connection) -> float:
        payload = payloads[turn[0] % len(payloads)]
        turn[0] += 1
        status, data = await connection.post(payload)
        if status != 200:
            errors.append(f"{status}: {data[:200]!r}")
        return time.perf_counter()

    async def warm(connection: Connection, until: float):
        while await send(connection) < until:
            pass

    async def client(connection: Connection, stop_at: float):
        while (sent := time.perf_counter()) < stop_at:
            done = await send(connection)
            latencies_ms.append((done - sent) * 1e3)  # every request sent in the window
            completed[0] += done < stop_at  # throughput: completions in the window

    await asyncio.wait_for(asyncio.gather(*(warm(c, time.perf_counter() + warmup) for c in connections)),
                           warmup + 120)
    stop_at = time.perf_counter() + duration
    await asyncio.wait_for(asyncio.gather(*(client(c, stop_at) for c in connections)), duration + 60)
    for connection in connections:
        connection.writer.close()
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, first: {errors[0]}")
    return {**percentiles(latencies_ms), "requests_per_s": completed[0] / duration}


def run_async(coroutine):
    try:
        import uvloop
        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


def scrape(port: int) -> dict[str, float]:
    """Unlabelled samples of our server's /metrics (the peer has none)."""
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            lines = response.read().decode().splitlines()
    except OSError:
        return {}
    return {name: float(value) for name, value in (line.split(" ", 1) for line in lines
                                                   if line and not line.startswith("#") and "{" not in line)}


def batch_stats(before: dict, after: dict) -> dict:
    """Mean sequences per engine batch and mean queue time over one level (with its warm-up)."""
    delta = lambda name: after.get(name, 0.0) - before.get(name, 0.0)
    if not delta("embedpipe_batch_sequences_count"):
        return {}
    return {"mean_batch_sequences": delta("embedpipe_batch_sequences_sum") / delta("embedpipe_batch_sequences_count"),
            "mean_queue_ms": 1e3 * delta("embedpipe_queue_seconds_sum")
                             / max(delta("embedpipe_queue_seconds_count"), 1)}


def concurrency(server, payloads: list[bytes], clients: int, sizes) -> dict:
    """One closed loop of `clients` against a server (sizes: warmup_seconds, concurrency_seconds), with our
    server's mean batch over it."""
    before = scrape(server.port)
    result = run_async(closed_loop(server.port, payloads, clients, sizes.warmup_seconds, sizes.concurrency_seconds))
    return {**result, **batch_stats(before, scrape(server.port))}
