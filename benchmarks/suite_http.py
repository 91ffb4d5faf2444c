"""Suites 3 and 4, over HTTP: our `embedpipe serve` against a peer behind the same stack (Starlette + uvicorn).

3. high throughput: requests of pre-tokenised sequences of 512 / 1024 / 4096 tokens (100 a request, fewer where
   100 would pass `throughput_request_tokens`; lengths cut to the model's max) from four client processes:
   embeddings/s;
4. concurrency: 1 / 2 / 4 / 8 / 16 closed-loop clients, each sending one text per request (tokenised in the
   server), of two kinds: 512-token passages and short queries of a few tokens: p50 / p90 / p99 / max ms.

Each server is a process of its own (http_servers.py; the peer: peer_server.py, sentence-transformers one
request at a time), both started at once, untimed, and kept for the model's rounds. A round runs three
sections (throughput, passages, queries); before each the GPU is warmed (clocks recorded) and ours, then the
peer, runs the section: ours and the peer alternate A B A B A B, and a ratio is taken within a round. The two
servers' vectors for the same texts and token ids are compared (cosine) before anything is timed.
"""
from __future__ import annotations

import queue

import numpy as np

from common import gpu_clocks, min_cosine, random_sequences
from http_clients import ThroughputClients, body, post_once, throughput, vectors, concurrency
from http_servers import start_servers, stop_servers, wait_servers
from isolation import OutOfBudget, ratio, round_robin, summarize, warm
from workloads import texts_of

AGREEMENT = 0.999
SECTIONS = ("throughput", "passages", "queries")


def agreement(servers: dict, inputs) -> float:
    got = {name: vectors(post_once(server.port, body(inputs))) for name, server in servers.items()}
    cosine = min_cosine(got["ours"], got["peer"])
    if cosine < AGREEMENT:
        raise SystemExit(f"ours and the peer server disagree (min cosine {cosine:.5f})")
    return cosine


class HttpRun:
    """Starts both servers and the client processes (`__init__`, not waiting); `ready()` waits for them;
    `measure()` runs the rounds."""

    def __init__(self, ctx):
        self.ctx, sizes, limit = ctx, ctx.sizes, ctx.info["max_tokens"]
        rng = np.random.default_rng(1)
        lengths = sorted({min(n, limit) for n in sizes.throughput_tokens})
        self.requests = {}  # tokens: (sequences per request, two payloads)
        for n in lengths:
            count = max(1, min(sizes.throughput_batch, sizes.throughput_request_tokens // n))
            self.requests[n] = (count, [body(random_sequences(rng, count, n)) for _ in range(2)])
        self.texts = {"passages": texts_of(ctx.folder, 64, min(sizes.concurrency_tokens, limit)),
                      "queries": texts_of(ctx.folder, 64, sizes.query_tokens, seed=2)}
        self.payloads = {kind: [body(t) for t in texts] for kind, texts in self.texts.items()}
        self.agreement_ids = random_sequences(rng, 4, min(128, limit))
        self.clients = ThroughputClients(sizes.throughput_clients)  # they start while the servers load
        self.servers = start_servers(ctx.folder, ctx.device, ctx.work, sizes.http_workers)

    def ready(self) -> None:
        left = self.ctx.deadline.left()
        try:
            wait_servers(self.servers, min(300.0, left))
            self.clients.wait_started(min(300.0, max(1.0, self.ctx.deadline.left())))
        except (SystemExit, queue.Empty):
            if left < 300 and self.ctx.deadline.left() < 2:
                raise OutOfBudget("the servers were not up within the run's budget") from None
            raise

    def stop(self) -> None:
        stop_servers(self.servers)
        self.clients.close()

    def measure(self) -> dict:
        ctx, sizes = self.ctx, self.ctx.sizes
        result = {"http_workers": sizes.http_workers, "pids": {n: [s.proc.pid] for n, s in self.servers.items()},
                  "agreement": {"texts": agreement(self.servers, self.texts["passages"][:4]),
                                "token_ids": agreement(self.servers, self.agreement_ids)}}
        for tokens, (_, payloads) in self.requests.items():  # untimed: graphs captured, kernels compiled
            for server in self.servers.values():
                post_once(server.port, payloads[0])
        systems = [f"{section}/{name}" for section in SECTIONS for name in self.servers]
        rounds, cut = round_robin(systems, sizes.rounds, self.run_one, ctx.deadline, "http")
        result.update(self.summary(rounds))
        result["rounds"] = len(rounds[systems[0]])
        if cut:
            result["rounds_cut"] = cut
        return result

    def run_one(self, system: str, r: int) -> dict:
        """One server's section in round r; the GPU warmed before ours (the section's first), clocks recorded."""
        section, name = system.split("/")
        server, sizes = self.servers[name], self.ctx.sizes
        clocks = warm(self.ctx.device) if name == "ours" else (gpu_clocks() if self.ctx.device != "cpu" else {})
        timeout = self.ctx.deadline.timeout() or 300
        if section == "throughput":
            try:
                levels = {str(n): throughput(server.port, self.clients, payloads, count, n, sizes.throughput_requests,
                                             timeout) for n, (count, payloads) in self.requests.items()}
            except queue.Empty:
                raise OutOfBudget("the throughput clients ran past the run's budget") from None
        else:
            levels = {str(c): concurrency(server, self.payloads[section], c, sizes) for c in sizes.concurrency}
        print(f"  round {r} {section:10s} {name:4s} " + "  ".join(
            f"{k}: {v['embeddings_per_s']:,.0f}/s" if section == "throughput" else f"{k}: p50 {v['p50']:.1f} ms"
            for k, v in levels.items()), flush=True)
        return {"clocks": clocks, "levels": levels}

    def summary(self, rounds: dict) -> dict:
        """Per level: each server's rounds summarised, ours vs the peer round by round; MFU from the median."""
        ctx = self.ctx
        out = {"clocks": {s: [r["clocks"] for r in values] for s, values in rounds.items()}, "throughput": {},
               "concurrency": {kind: {"tokens": self.texts_tokens(kind), "levels": {}} for kind in SECTIONS[1:]}}
        for section in SECTIONS:
            ours, peer = ([r["levels"] for r in rounds[f"{section}/{n}"]] for n in ("ours", "peer"))
            for level in ours[0]:
                o, p = [r[level] for r in ours], [r[level] for r in peer]
                row = {"ours": summarize(o), "peer": summarize(p)}
                if section == "throughput":
                    row["sequences"] = self.requests[int(level)][0]
                    row["vs"] = {"peer": ratio(o, p, "embeddings_per_s", True)}
                    for name in ("ours", "peer"):
                        rate = row[name]["tokens_per_s"]["median"]
                        row[name]["mfu"] = rate * ctx.info["flops_per_token"] / (ctx.ceiling["matmul_tflops"] * 1e12)
                    out["throughput"][level] = row
                else:
                    row["vs"] = {"peer": ratio(o, p, "p50", False), "peer_requests_per_s": ratio(o, p, "requests_per_s",
                                                                                                 True)}
                    out["concurrency"][section]["levels"][level] = row
        return out

    def texts_tokens(self, kind: str) -> int:
        sizes = self.ctx.sizes
        return min(sizes.concurrency_tokens, self.ctx.info["max_tokens"]) if kind == "passages" else sizes.query_tokens
