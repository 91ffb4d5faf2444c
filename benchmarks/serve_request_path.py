"""The server's request path alone: `embedpipe serve` whose engine returns zeros at once, under load.

    python benchmarks/serve_request_path.py [--clients 1,16] [--seconds 5] [--tokens 512] [--http-workers 1,4]
        [--max-in-flight 1,2] [--device-ms 1.0]

What is left of a request once the engine costs nothing (HTTP, JSON, tokenisation threads, the
scheduler, base64): if the rate here matches the GPU run's, the server, not the device, bounds it.
`--device-ms` gives each batch that much simulated device time (its handle completes then, one
batch after another, as on a CUDA stream), to study the scheduler's waiting on the CPU.
Uses suite 4's closed-loop clients and texts (benchmarks/http_clients.py).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from http_clients import body, closed_loop, run_async
from http_servers import MODEL_NAME, OURS_READY, Server
from workloads import texts_of


class SimulatedEvent:
    """A CUDA event's interface: complete `seconds` after the device's previous batch (one stream)."""

    device_free_at = 0.0

    def __init__(self, seconds: float):
        now = time.perf_counter()
        SimulatedEvent.device_free_at = self.done_at = max(now, SimulatedEvent.device_free_at) + seconds

    def query(self) -> bool:
        return time.perf_counter() >= self.done_at

    def synchronize(self) -> None:
        time.sleep(max(0.0, self.done_at - time.perf_counter()))


def serve_with_null_engine() -> None:
    """Runs `embedpipe serve ...` (argv after --serve [--device-ms MS]) with Engine.step replaced by one that
    returns zeros: at once, or after MS milliseconds of simulated device time per batch."""
    import torch

    from embedpipe.cli.main import app
    from embedpipe.kernels.engine import Engine
    from embedpipe.kernels.lazy_tensor import LazyTensor

    argv = sys.argv[2:]
    device_s = float(argv[1]) / 1e3 if argv[:1] == ["--device-ms"] else 0.0
    argv = argv[2:] if argv[:1] == ["--device-ms"] else argv
    if device_s:
        Engine.step = lambda self, batch: LazyTensor(torch.zeros(batch.num_seqs, self.output.width),
                                                     SimulatedEvent(device_s))
    else:
        Engine.step = lambda self, batch: LazyTensor(torch.zeros(batch.num_seqs, self.output.width))
    sys.argv = ["embedpipe", "serve", *argv]
    app()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--model", default="minilm", help="its tokenizer and limits are used; its weights are not run")
    parser.add_argument("--http-workers", default="1", help="comma-separated: one server per value")
    parser.add_argument("--max-in-flight", default="2", help="comma-separated: one server per value")
    parser.add_argument("--device-ms", type=float, default=0.0, help="simulated device time per batch")
    args = parser.parse_args()
    from embedpipe.kernels.models.model_folder import resolve_model_path
    payloads = [body(text) for text in texts_of(resolve_model_path(args.model), 64, args.tokens)]
    for workers, in_flight in itertools.product(args.http_workers.split(","), args.max_in_flight.split(",")):
        command = [sys.executable, __file__, "--serve", "--device-ms", str(args.device_ms), "--model", args.model,
                   "--device", "cpu", "--http-workers", workers, "--max-in-flight", in_flight,
                   "--served-model-name", MODEL_NAME]
        server = Server("null-engine server", command, Path("/tmp/embedpipe-null-server.log"), {"OMP_NUM_THREADS": "1"},
                        OURS_READY)
        server.wait_healthy()
        try:
            for clients in map(int, args.clients.split(",")):
                r = run_async(closed_loop(server.port, payloads, clients, 1.0, args.seconds))
                print(f"{workers} HTTP processes, {in_flight} in flight, {clients:3d} clients: p50 {r['p50']:.2f} ms, "
                      f"p90 {r['p90']:.2f}, p99 {r['p99']:.2f}, {r['requests_per_s']:,.0f} requests/s", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    serve_with_null_engine() if sys.argv[1:2] == ["--serve"] else main()
