"""The online path of two builds of `embedpipe serve`, A B A B ..., each server a fresh process.

    python benchmarks/serve_online_ab.py --out DIR --model FOLDER --system before=/path/to/site --system after= \\
        [--device cuda] [--http-workers 4] [--clients 1,4,16] [--rounds 2] [--seconds 3]

A system is a name and a PYTHONPATH entry put first (empty: this checkout); `--system-env NAME:VAR=VALUE` sets a
variable for that system's servers (e.g. EMBEDPIPE_CACHE_DIR: which measured attention choice auto runs), and
`--system-args NAME:ARGS` adds serve options (e.g. `spin= --system-args "nospin:--idle-spin-us 0"`).
Per server: closed-loop clients
(suite 4's, one keep-alive connection each) send one text per request: a short query (~12 tokens) as JSON
floats and as base64, and a 512-token passage as base64; p50 / p90 / p99 and requests/s per client count.
Then 200 requests of the first workload, one at a time, read the x-*-time headers, where the build sends them: the time
of each hop.
Writes DIR/serve-online-ab.json and prints a table.
"""
from __future__ import annotations

import argparse
import http.client
import json
import shlex
import statistics
import sys
from pathlib import Path

from common import ab_systems, add_system_option
from http_clients import closed_loop, run_async
from http_servers import OURS_READY, Server
from workloads import texts_of

PHASES = ("parse", "tokenization", "queue", "inference", "encode", "total")


def payload(text: str, encoding: str) -> bytes:
    return json.dumps({"input": text, "encoding_format": encoding}).encode()


def hops(port: int, payloads: list[bytes], count: int = 200) -> dict:
    """Median ms of each x-<phase>-time header over `count` requests sent one at a time (empty: none sent)."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    times: dict[str, list[float]] = {phase: [] for phase in PHASES}
    for i in range(count):
        connection.request("POST", "/v1/embeddings", payloads[i % len(payloads)], {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        for phase in PHASES:
            value = response.getheader(f"x-{phase}-time")
            if value is not None:
                times[phase].append(float(value))
    return {phase: statistics.median(v) for phase, v in times.items() if v}


def measure(server: Server, workloads: dict[str, list[bytes]], clients: list[int], seconds: float) -> dict:
    out = {}
    for name, payloads in workloads.items():
        for count in clients:
            r = run_async(closed_loop(server.port, payloads, count, 1.0, seconds))
            out[f"{name} {count} clients"] = {k: r[k] for k in ("p50", "p90", "p99", "requests_per_s")}
    out["hops_ms"] = hops(server.port, next(iter(workloads.values())))
    return out


def system_env(specs: list[str]) -> dict[str, dict[str, str]]:
    """--system-env NAME:VAR=VALUE options -> {NAME: {VAR: VALUE}}."""
    env: dict[str, dict[str, str]] = {}
    for spec in specs:
        name, assignment = spec.split(":", 1)
        var, value = assignment.split("=", 1)
        env.setdefault(name, {})[var] = value
    return env


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--model", type=Path, required=True)
    add_system_option(parser)
    parser.add_argument("--system-env", action="append", default=[], help="NAME:VAR=VALUE for that system's servers")
    parser.add_argument("--system-args", action="append", default=[],
                        help="NAME:ARGS, more `embedpipe serve` options for that system's servers "
                             "(e.g. --idle-spin-us 0)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--http-workers", type=int, default=4)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workloads", default="query float,query base64,passage-512 base64")
    args = parser.parse_args()
    queries, passages = texts_of(args.model, 64, 12), texts_of(args.model, 64, 512)
    workloads = {"query float": [payload(t, "float") for t in queries],
                 "query base64": [payload(t, "base64") for t in queries],
                 "passage-512 base64": [payload(t, "base64") for t in passages]}
    workloads = {name: workloads[name] for name in args.workloads.split(",")}
    clients = [int(c) for c in args.clients.split(",")]
    systems = ab_systems(args.system)
    extra_env = system_env(args.system_env)
    extra_args = {name: shlex.split(rest) for name, _, rest in (spec.partition(":") for spec in args.system_args)}
    for option, named in (("--system-env", extra_env), ("--system-args", extra_args)):
        if set(named) - set(systems):
            raise SystemExit(f"{option} names no --system: {', '.join(sorted(set(named) - set(systems)))}")
    rounds: dict[str, list[dict]] = {name: [] for name in systems}
    for r in range(args.rounds):
        for name, pythonpath in systems.items():
            env = {"PYTHONPATH": pythonpath, **extra_env.get(name, {})}
            command = [sys.executable, "-m", "embedpipe.cli.main", "serve", "--model", str(args.model),
                       "--device", args.device, "--http-workers", str(args.http_workers), *extra_args.get(name, [])]
            log = Path(f"/tmp/serve-ab-{name}-{r}.log")
            server = Server(name, command, log, env, OURS_READY)
            try:
                server.wait_healthy()
                rounds[name].append(measure(server, workloads, clients, args.seconds))
            finally:
                server.stop()
            print(name, r, json.dumps(rounds[name][-1]), flush=True)
    summary = {}
    for name, results in rounds.items():
        for key in results[0]:
            if key != "hops_ms":
                p50s = [res[key]["p50"] for res in results]
                rates = [res[key]["requests_per_s"] for res in results]
                summary.setdefault(key, {})[name] = {"p50_ms": statistics.median(p50s), "p50_min": min(p50s),
                                                     "p50_max": max(p50s), "requests_per_s": statistics.median(rates)}
    for key, by_system in summary.items():
        print(f"{key:32s}", "  ".join(f"{n} p50 {v['p50_ms']:.2f} ms [{v['p50_min']:.2f}-{v['p50_max']:.2f}] "
                                       f"{v['requests_per_s']:,.0f}/s" for n, v in by_system.items()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "serve-online-ab.json").write_text(json.dumps({"rounds": rounds, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
