"""Suite 4 (closed-loop clients, one 512-token text each, or --tokens 8 for suite 4's short queries) against
`embedpipe serve` under several settings, to choose the defaults: HTTP processes (--http-workers) x engine batches
in flight (--max-in-flight). Our server only; run.py measures the peer.

    python benchmarks/serve_settings.py --model bert-base --http-workers 4,8 --max-in-flight 1,2 [--repeats 3] --out DIR
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import model_folder  # noqa: E402
from http_clients import body, concurrency  # noqa: E402
from http_servers import Server, our_server  # noqa: E402
from sizes import Sizes  # noqa: E402
from workloads import texts_of  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--http-workers", default="4,8")
    parser.add_argument("--max-in-flight", default="1,2")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--repeats", type=int, default=1, help="measurements per setting and client count")
    parser.add_argument("--tokens", type=int, default=None, help="tokens per text (default: suite 4's passages)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "embedpipe-bench-models")
    args = parser.parse_args()
    sizes = Sizes(concurrency_seconds=1.5, warmup_seconds=0.5)  # the windows these settings were measured with
    folder = model_folder(args.model, args.cache)
    tokens = args.tokens or sizes.concurrency_tokens
    payloads = [body(t) for t in texts_of(folder, 64, tokens)]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for workers, in_flight in itertools.product(args.http_workers.split(","), args.max_in_flight.split(",")):
        command = our_server(folder, args.device, "--http-workers", workers, "--max-in-flight", in_flight)
        server = Server("ours", command, args.out / f"serve-{workers}-{in_flight}.log")
        try:
            server.wait_healthy()
            for clients, repeat in itertools.product(map(int, args.clients.split(",")), range(args.repeats)):
                r = concurrency(server, payloads, clients, sizes)
                rows.append({"http_workers": int(workers), "max_in_flight": int(in_flight), "clients": clients,
                             "repeat": repeat, **r})
                print(f"http-workers {workers} max-in-flight {in_flight} clients {clients:2d}: p50 {r['p50']:.2f} ms "
                      f"p99 {r['p99']:.2f} ms {r['requests_per_s']:,.0f} req/s "
                      f"batch {r.get('mean_batch_sequences', 0):.1f} queue {r.get('mean_queue_ms', 0):.2f} ms",
                      flush=True)
        finally:
            server.stop()
    (args.out / "serve_settings.json").write_text(json.dumps({"model": args.model, "date": time.strftime("%Y-%m-%d"),
                                                               "tokens": tokens, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
