"""Suites 3 and 4, over HTTP: our `embedpipe serve` against a peer behind the same stack (Starlette + uvicorn).

3. high throughput: requests of 100 pre-tokenised sequences of 512 / 1024 / 4096 tokens from
   four concurrent client processes: embeddings/s;
4. concurrency: 1 / 2 / 4 / 8 / 16 closed-loop clients, each sending one text of 512 tokens
   (tokenised in the server): p50 / p90 / p99 / max ms.

The peer (`--peer`, below) is sentence-transformers in the run dtype, one request at a time under
a lock: `encode` for texts, its modules on padded batches of 32 for token ids. Both return base64.
The two servers' embeddings are compared (cosine) before anything is timed.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from common import min_cosine, percentiles, random_sequences
from workloads import texts_of

HERE = Path(__file__).resolve()
AGREEMENT = 0.999


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess on a free loopback port; `wait_healthy()` polls /health (and, given `ready_line`,
    waits for that line in the log), `stop()` sends SIGTERM and waits."""

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
        raise SystemExit(f"{self.name} not healthy after {timeout} s:\n{self.log.read_text()}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


OURS_READY = "embedpipe: serving"  # printed once the server listens (with --http-workers N, every HTTP process)


MODEL_NAME = "bench"  # what the clients ask for; our server answers to it (--served-model-name)


def our_server(folder: Path, device: str, *options) -> list[str]:
    """The command of `embedpipe serve` on the model folder, with more options (without --port)."""
    return [sys.executable, "-m", "embedpipe.cli.main", "serve", "--model", str(folder), "--device", device,
            "--served-model-name", MODEL_NAME, *map(str, options)]


def start_servers(folder: Path, device: str, logs: Path, http_workers: int) -> dict[str, Server]:
    commands = {"ours": our_server(folder, device, "--http-workers", http_workers),
                "peer": [sys.executable, str(HERE), "--peer", "--model", str(folder), "--device", device]}
    # on a small shared CPU, OpenMP teams that spin while idle (the peer's thread-pool workers each get one)
    # starve each other for hundreds of ms; passive waiting, for both servers, measures the servers instead
    env = {"OMP_WAIT_POLICY": "PASSIVE"} if device == "cpu" else {}
    servers = {}
    try:  # both load at once
        for name, command in commands.items():
            servers[name] = Server(name, command, logs / f"{folder.name}-{name}.log", env,
                                   OURS_READY if name == "ours" else "")
        for server in servers.values():
            server.wait_healthy()
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: dict[str, Server]) -> None:
    for server in servers.values():
        server.stop()


def body(inputs, encoding: str = "base64") -> bytes:
    return json.dumps({"model": MODEL_NAME, "input": inputs, "encoding_format": encoding}).encode()


def post(connection: http.client.HTTPConnection, payload: bytes) -> bytes:
    connection.request("POST", "/v1/embeddings", payload, {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
    return data


def vectors(data: bytes) -> np.ndarray:
    rows = json.loads(data)["data"]
    return np.stack([np.frombuffer(base64.b64decode(r["embedding"]), dtype=np.float32) for r in rows])


def agreement(servers: dict[str, Server], inputs) -> float:
    got = {}
    for name, server in servers.items():
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        got[name] = vectors(post(connection, body(inputs)))
        connection.close()
    cosine = min_cosine(got["ours"], got["peer"])
    if cosine < AGREEMENT:
        raise SystemExit(f"ours and the peer server disagree (min cosine {cosine:.5f})")
    return cosine


# ---- suite 3: client processes, each a closed loop of `requests` requests per round
def throughput_client(tasks, ready, start, results) -> None:
    """One client process: per task (port, payloads, requests), connects, reports ready, waits for the
    common start, sends its requests back to back and returns (sent, done) times; None ends it."""
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

    def round(self, port: int, payloads: list[bytes], requests: int) -> list[tuple[float, float]]:
        for tasks in self.tasks:
            tasks.put((port, payloads, requests))
        for _ in self.tasks:
            self.ready.get(timeout=300)
        self.start.set()  # every client is connected and waiting
        times = [t for _ in self.tasks for t in self.results.get(timeout=300)]
        self.start.clear()  # each client has passed its wait: the next round waits again
        return times

    def close(self) -> None:
        for tasks in self.tasks:
            tasks.put(None)
        for process in self.processes:
            process.join(30)


def throughput(server: Server, clients: ThroughputClients, length: int, sizes, rng) -> dict:
    """Embeddings/s of `throughput_clients` processes sending requests of `throughput_batch` sequences."""
    payloads = [body(random_sequences(rng, sizes.throughput_batch, length)) for _ in range(2)]
    post(http.client.HTTPConnection("127.0.0.1", server.port, timeout=120), payloads[0])  # warm-up (graphs, JIT)
    times = clients.round(server.port, payloads, sizes.throughput_requests)
    elapsed = max(done for _, done in times) - min(sent for sent, _ in times)
    embeddings = len(times) * sizes.throughput_batch
    return {"embeddings_per_s": embeddings / elapsed, "tokens_per_s": embeddings * length / elapsed,
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
    """`clients` clients, each sending its next request as soon as the last returns."""
    connections = [await Connection().open(port) for _ in range(clients)]
    latencies_ms, completed, errors, turn = [], [0], [], [0]
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration

    async def client(connection: Connection):
        while (sent := time.perf_counter()) < stop_at:
            payload = payloads[turn[0] % len(payloads)]
            turn[0] += 1
            status, data = await connection.post(payload)
            done = time.perf_counter()
            if status != 200:
                errors.append(f"{status}: {data[:200]!r}")
            if sent >= measure_from:  # latency of the requests sent in the window
                latencies_ms.append((done - sent) * 1e3)
            completed[0] += measure_from <= done < stop_at  # throughput: completions in the window

    await asyncio.wait_for(asyncio.gather(*(client(c) for c in connections)), warmup + duration + 60)
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
            "mean_queue_ms": 1e3 * delta("embedpipe_queue_seconds_sum") / max(delta("embedpipe_queue_seconds_count"), 1)}


def concurrency(server: Server, payloads: list[bytes], clients: int, sizes) -> dict:
    before = scrape(server.port)
    result = run_async(closed_loop(server.port, payloads, clients, sizes.warmup_seconds, sizes.concurrency_seconds))
    return {**result, **batch_stats(before, scrape(server.port))}


def run(folder: Path, device: str, sizes, work: Path, max_tokens: int, flops_per_token: int, ceiling: dict) -> dict:
    rng = np.random.default_rng(1)
    texts = texts_of(folder, 64, sizes.concurrency_tokens)
    text_payloads = [body(t) for t in texts]
    clients = ThroughputClients(sizes.throughput_clients)  # they start while the servers load
    try:
        start = time.perf_counter()
        servers = start_servers(folder, device, work, sizes.http_workers)
        print(f"  servers up in {time.perf_counter() - start:.1f} s", flush=True)
        try:
            return measure(servers, clients, text_payloads, texts, sizes, rng, max_tokens, flops_per_token, ceiling)
        finally:
            start = time.perf_counter()
            stop_servers(servers)
            print(f"  servers stopped in {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        clients.close()


def measure(servers: dict[str, Server], clients: ThroughputClients, text_payloads: list[bytes], texts: list[str],
            sizes, rng, max_tokens: int, flops_per_token: int, ceiling: dict) -> dict:
    result = {"throughput": {}, "concurrency": {}, "concurrency_tokens": min(sizes.concurrency_tokens, max_tokens),
              "http_workers": sizes.http_workers}
    result["http_agreement"] = {"texts": agreement(servers, texts[:4]),
                                "token_ids": agreement(servers, random_sequences(rng, 4, min(128, max_tokens)))}
    for length in sizes.throughput_tokens:
        if length > max_tokens:
            result["throughput"][str(length)] = {"skipped": f"longer than the model's {max_tokens} positions"}
            continue
        row = result["throughput"][str(length)] = {}
        for name, server in servers.items():
            start = time.perf_counter()
            row[name] = r = throughput(server, clients, length, sizes, rng)
            r["mfu"] = r["tokens_per_s"] * flops_per_token / (ceiling["matmul_tflops"] * 1e12)
            print(f"  throughput {length:5d} tokens  {name:5s} {r['embeddings_per_s']:10.1f} embeddings/s"
                  f"  ({time.perf_counter() - start:.1f} s)", flush=True)
    for count in sizes.concurrency:
        row = result["concurrency"][str(count)] = {}
        for name, server in servers.items():
            row[name] = r = concurrency(server, text_payloads, count, sizes)
            print(f"  concurrency {count:2d}  {name:5s} p50 {r['p50']:8.2f} ms  {r['requests_per_s']:8.1f} req/s",
                  flush=True)
    return result


# ---- the peer server
def peer_app(folder: Path, device: str):
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from common import SentenceTransformersPeer
    from embedpipe.pipeline.serve.protocol import embeddings_response

    peer, lock = SentenceTransformersPeer(folder, device), threading.Lock()

    def embed(payload: dict) -> bytes:
        inputs = payload["input"]
        inputs = [inputs] if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)) else inputs
        with lock:  # one request at a time
            result = peer.encode(inputs) if isinstance(inputs[0], str) else peer(inputs).numpy()
        return embeddings_response(result.astype(np.float32), payload.get("encoding_format", "float"), "peer", 0)

    async def embeddings(request: Request) -> Response:  # the model runs on the thread pool, off the event loop
        return Response(await run_in_threadpool(embed, await request.json()), media_type="application/json")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]),
                             Route("/health", health, methods=["GET"])])


def main() -> None:
    parser = argparse.ArgumentParser(description="the peer server of the HTTP suites (started by run.py)")
    parser.add_argument("--peer", action="store_true", required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvicorn
    uvicorn.run(peer_app(args.model, args.device), host="127.0.0.1", port=args.port, access_log=False,
                log_level="warning")


if __name__ == "__main__":
    main()
