"""Server benchmark: latency and throughput over HTTP against a one-request-at-a-time peer, same run.

    python benchmarks/serve_bench.py --model bert-base --out benchmarks/results/DATE-h200-serve
    python benchmarks/serve_bench.py --quick            # CPU smoke run, about a minute

Both servers run as subprocesses behind the same HTTP stack (FastAPI + uvicorn) and take the
same OpenAI-style request (one text of --tokens tokens, base64 output); tokenisation happens in
the server. ours: `embedpipe serve`. peer: a tiny FastAPI app in this file calling
SentenceTransformer.encode per request under a lock. Closed-loop clients (1/2/4/8/16 by
default) on keep-alive connections, written on raw asyncio streams so the client costs little.
The two servers' embeddings are compared (cosine) before anything is timed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from common import environment, model_folder, percentiles, write_results

HERE = Path(__file__).resolve()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_texts(folder: Path, num_texts: int, num_tokens: int, seed: int = 0) -> list[str]:
    """Distinct texts of random whole words that tokenise to about `num_tokens` tokens each."""
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) > 2]
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(num_texts):
        picked = rng.choice(words, size=num_tokens).tolist()
        ids = tokenizer.encode(" ".join(picked), add_special_tokens=False).ids
        texts.append(tokenizer.decode(ids[: num_tokens - 2]))  # room for [CLS] and [SEP]
    return texts


class Server:
    """A server subprocess on a free loopback port; `stop()` sends SIGTERM and waits."""

    def __init__(self, name: str, command: list[str], log: Path, env: dict | None = None):
        self.name, self.port = name, free_port()
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen([*command, "--port", str(self.port)], stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})
        self._wait_healthy()

    def _wait_healthy(self, timeout: float = 600) -> None:
        import urllib.request
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise SystemExit(f"{self.name} not healthy after {timeout} s:\n{self.log.read_text()}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the response (Content-Length only)."""

    def __init__(self, port: int):
        self.port = port

    async def open(self) -> Connection:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in header.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def request_body(text: str, encoding: str) -> bytes:
    return json.dumps({"model": "bench", "input": text, "encoding_format": encoding}).encode()


async def run_level(port: int, bodies: list[bytes], concurrency: int, warmup: float, duration: float) -> dict:
    """Closed loop: `concurrency` clients, each sending its next request as soon as the last returns."""
    connections = [await Connection(port).open() for _ in range(concurrency)]
    latencies_ms, completed, errors, next_body = [], [0], [], [0]
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + duration

    async def client(connection: Connection):
        while (sent := time.perf_counter()) < stop_at:
            body = bodies[next_body[0] % len(bodies)]
            next_body[0] += 1
            status, payload = await connection.post("/v1/embeddings", body)
            done = time.perf_counter()
            if status != 200:
                errors.append(f"{status}: {payload[:200]!r}")
            if sent >= measure_from:  # latency of the requests sent in the window
                latencies_ms.append((done - sent) * 1e3)
            completed[0] += measure_from <= done < stop_at  # throughput: completions in the window

    await asyncio.gather(*(client(c) for c in connections))
    for connection in connections:
        connection.close()
    if errors:
        raise SystemExit(f"{len(errors)} requests failed, first: {errors[0]}")
    return {**percentiles(latencies_ms), "requests_per_s": completed[0] / duration, "requests": len(latencies_ms)}


async def embed_once(port: int, text: str) -> np.ndarray:
    connection = await Connection(port).open()
    status, payload = await connection.post("/v1/embeddings", request_body(text, "float"))
    connection.close()
    assert status == 200, payload[:300]
    return np.array(json.loads(payload)["data"][0]["embedding"], dtype=np.float64)


def agreement(servers: dict[str, Server], text: str) -> float:
    """Cosine similarity of the two servers' embeddings of one text."""
    a, b = (run_async(embed_once(servers[name].port, text)) for name in ("ours", "peer"))
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


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
    """Mean sequences per batch and mean queue time over one level (with its warm-up)."""
    delta = lambda name: after.get(name, 0.0) - before.get(name, 0.0)
    if not delta("embedpipe_batch_sequences_count"):
        return {}
    return {"mean_batch_sequences": delta("embedpipe_batch_sequences_sum") / delta("embedpipe_batch_sequences_count"),
            "mean_queue_ms": 1e3 * delta("embedpipe_queue_seconds_sum") / max(delta("embedpipe_queue_seconds_count"), 1)}


def bench_server(server: Server, bodies: list[bytes], levels: list[int], warmup: float, duration: float) -> dict:
    results = {}
    for concurrency in levels:
        before = scrape(server.port)
        r = run_async(run_level(server.port, bodies, concurrency, warmup, duration))
        results[str(concurrency)] = r = {**r, **batch_stats(before, scrape(server.port))}
        extra = f"  batch {r['mean_batch_sequences']:5.1f} seqs" if "mean_batch_sequences" in r else ""
        print(f"{server.name:5s} c={concurrency:2d}  p50 {r['p50']:8.2f} ms  p99 {r['p99']:8.2f} ms  "
              f"{r['requests_per_s']:9.1f} req/s{extra}", flush=True)
    return results


def table(results: dict) -> str:
    env, cfg = results["environment"], results["config"]
    lines = [f"# Server benchmark, {env['date']}, {env.get('gpu') or 'CPU'}, torch {env['torch']}",
             f"model {cfg['model']}, device {cfg['device']}, ~{cfg['tokens']}-token texts, {cfg['encoding']} output, "
             f"{cfg['duration']} s per level; embeddings cosine ours vs peer {results['cosine_vs_peer']:.5f}", "",
             "| clients | server | p50 ms | p90 ms | p99 ms | max ms | req/s | vs peer |", "|---|---|---|---|---|---|---|---|"]
    for level in cfg["concurrency"]:
        peer_rps = results["peer"][str(level)]["requests_per_s"]
        for name in ("ours", "peer"):
            r = results[name][str(level)]
            lines.append(f"| {level} | {name} | {r['p50']:.2f} | {r['p90']:.2f} | {r['p99']:.2f} | {r['max']:.2f} | "
                         f"{r['requests_per_s']:.1f} | {r['requests_per_s'] / peer_rps:.2f}x |")
    return "\n".join(lines) + "\n"


def peer_app(folder: Path, device: str):
    """sentence-transformers behind FastAPI: one request at a time, under a lock."""
    import torch
    from fastapi import Body, FastAPI, Response
    from sentence_transformers import SentenceTransformer

    from embedpipe.pipeline.serve_protocol import embeddings_response

    model = SentenceTransformer(str(folder), device=device)
    if model.device.type == "cuda":
        model.to(torch.bfloat16)  # the dtype our engine runs in on CUDA
    lock, app = threading.Lock(), FastAPI()

    @app.post("/v1/embeddings")
    def embeddings(body: dict = Body(...)) -> Response:  # a plain def: FastAPI runs it on its thread pool
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        with lock:
            vectors = model.encode(texts, convert_to_tensor=True).float().cpu().numpy()  # numpy has no bf16
        payload = embeddings_response(vectors, body.get("encoding_format", "float"), "peer", 0)
        return Response(payload, media_type="application/json")

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    return app


def run_peer(args) -> None:
    import uvicorn
    uvicorn.run(peer_app(Path(args.model), args.device), host="127.0.0.1", port=args.port, access_log=False,
                log_level="warning")


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base", help="minilm, a random-weight shape (bert-base, ...) or a folder")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per concurrency level")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each level")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--tokens", type=int, default=512, help="tokens per text (cut at the model's max_seq_length)")
    parser.add_argument("--encoding", default="base64", choices=("base64", "float"))
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: minilm, 3 s levels, 64-token texts")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/embedpipe-bench-models"))
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)  # run the peer server (internal)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return run_peer(args)
    if args.quick:
        args.model, args.device, args.duration, args.warmup, args.tokens = "minilm", "cpu", 3.0, 1.0, 64
    args.device = resolve_device(args.device)
    folder = Path(args.model) if Path(args.model).is_dir() else model_folder(args.model, args.cache)
    levels = [int(c) for c in args.concurrency.split(",")]
    out = args.out or Path(f"benchmarks/results/{time.strftime('%Y-%m-%d')}-{args.device.split(':')[0]}-serve")
    out.mkdir(parents=True, exist_ok=True)
    texts = make_texts(folder, 512, args.tokens)
    bodies = [request_body(t, args.encoding) for t in texts]
    results = {"environment": environment(),
               "config": {"model": args.model, "device": args.device, "tokens": args.tokens, "encoding": args.encoding,
                          "duration": args.duration, "warmup": args.warmup, "concurrency": levels}}
    commands = {"ours": [sys.executable, "-m", "embedpipe.cli.main", "serve", "--model", str(folder),
                         "--device", args.device],
                "peer": [sys.executable, str(HERE), "--peer", "--model", str(folder), "--device", args.device]}
    # on a small shared CPU, OpenMP teams that spin while idle (the peer's thread-pool workers each get one)
    # starve each other for hundreds of ms; passive waiting, for both servers, measures the servers instead
    env = {"OMP_WAIT_POLICY": "PASSIVE"} if args.device == "cpu" else {}
    servers = {}
    try:
        for name, command in commands.items():
            servers[name] = Server(name, command, out / f"{name}.log", env)
        results["cosine_vs_peer"] = agreement(servers, texts[0])
        assert results["cosine_vs_peer"] >= 0.99, f"ours and the peer disagree (cosine {results['cosine_vs_peer']:.4f})"
        for name, server in servers.items():
            results[name] = bench_server(server, bodies, levels, args.warmup, args.duration)
    finally:
        for server in servers.values():
            server.stop()
    write_results(results, out, table(results))
    print(table(results), flush=True)


if __name__ == "__main__":
    main()
