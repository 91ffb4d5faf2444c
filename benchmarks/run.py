"""Every benchmark suite, against transformers and sentence-transformers in the same run.

    python benchmarks/run.py                 # on the GPU: every suite and model (H200: ~8 min from the suites' clocks)
    python benchmarks/run.py --quick         # CPU smoke run of every suite on the default model (CI)
    python benchmarks/run.py --models bert-base --suites http --out DIR

Suites (each module's docstring says how it measures):
  latency   1. batch 1, 128 / 512 / 4096 tokens   2. batches of 5 / 25 / 50 x 512 tokens  (suite_latency.py)
  http      3. requests of 100 x 512 / 1024 / 4096 tokens from 4 client processes
            4. 1 / 2 / 4 / 8 / 16 concurrent single 512-token texts                      (suite_http.py)
  indexing  5. `embedpipe index` end to end on a corpus of 20-512 token rows             (suite_indexing.py)

Models: all-MiniLM-L6-v2 (real weights) and random-weight BERT-base, Qwen3-0.6B (causal, last
token) and pplx-embed-0.6B (bidirectional, mean) shapes. Ceilings (dense matmul rate, copy
bandwidth) are measured first, in the same run. Writes results.json, results.md and PNG plots
(when matplotlib is installed; else `python benchmarks/report.py DIR` draws them later).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

import report  # noqa: E402
import suite_http  # noqa: E402
import suite_indexing  # noqa: E402
import suite_latency  # noqa: E402
from common import MODELS, ceilings, environment, linear_params, model_folder  # noqa: E402

SUITES = ("latency", "http", "indexing")


@dataclass(frozen=True)
class Sizes:
    latency_tokens: tuple[int, ...] = (128, 512, 4096)
    latency_iters: int = 100  # ours; the peers are slower and get fewer
    peer_iters: int = 20
    measure_seconds: float = 1.0  # or fewer calls (at least 20) once they took this long
    scoring_batches: tuple[int, ...] = (5, 25, 50)
    scoring_tokens: int = 512
    throughput_tokens: tuple[int, ...] = (512, 1024, 4096)
    throughput_batch: int = 100
    throughput_clients: int = 4
    throughput_requests: int = 1  # per client, after one warm-up request
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    concurrency_tokens: int = 512
    concurrency_seconds: float = 1.5
    warmup_seconds: float = 0.5
    http_workers: int = 4  # our server's HTTP processes (`embedpipe serve --http-workers`) in suites 3 and 4
    corpus_rows: int = 10000
    peer_rows: int = 1000  # the peers embed the first rows of the corpus


QUICK = Sizes(latency_tokens=(32, 128), latency_iters=5, peer_iters=3, scoring_batches=(2, 5), scoring_tokens=64,
              throughput_tokens=(64,), throughput_batch=10, throughput_requests=2, concurrency=(1, 4),
              concurrency_tokens=64, concurrency_seconds=1.0, warmup_seconds=0.5, http_workers=2, corpus_rows=96,
              peer_rows=32)


def gpu_slug() -> str:
    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name().lower().replace("nvidia", "")
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-").split("-")[0]


def bench_model(name: str, device: str, sizes: Sizes, suites: list[str], ceiling: dict, cache: Path,
                work: Path, after_suite) -> dict:
    """The model's suites; `after_suite(result)` runs after each, so a killed run keeps what it measured."""
    folder = model_folder(name, cache)
    from embedpipe.kernels.models.model_folder import read_model_folder
    spec = read_model_folder(str(folder))
    params = linear_params(folder)
    result = {"linear_params": params, "flops_per_token": 2 * params, "max_tokens": spec.max_seq_length,
              "weight_bytes": params * (2 if device.startswith("cuda") else 4), "seconds": {}}
    for suite in suites:
        start = time.perf_counter()
        print(f"{name}: {suite}", flush=True)
        try:
            if suite == "latency":
                result.update(suite_latency.run(folder, device, sizes, ceiling, result["weight_bytes"], 2 * params))
            elif suite == "http":
                result.update(suite_http.run(folder, device, sizes, work, spec.max_seq_length, 2 * params, ceiling))
            else:
                result["indexing"] = suite_indexing.run(folder, device, sizes, work)
        except (Exception, SystemExit) as error:  # a failed suite is reported; the others still run
            result.setdefault("errors", {})[suite] = "".join(traceback.format_exception(error))[-4000:]
            print(f"{name}: {suite} FAILED\n{result['errors'][suite]}", flush=True)
        result["seconds"][suite] = time.perf_counter() - start
        print(f"{name}: {suite} took {result['seconds'][suite]:.0f} s", flush=True)
        after_suite(result)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: the default model, small sizes")
    parser.add_argument("--models", default=None, help=f"comma-separated (default: {','.join(MODELS)}; --quick: minilm)")
    parser.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated of {', '.join(SUITES)}")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/DATE-GPU")
    parser.add_argument("--merge", action="store_true", help="add to an existing results.json in --out")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "embedpipe-bench-models")
    args = parser.parse_args()
    device = "cpu" if args.quick or not torch.cuda.is_available() else "cuda"
    sizes = QUICK if args.quick else Sizes()
    models = (args.models or ("minilm" if args.quick else ",".join(MODELS))).split(",")
    suites = [s for s in args.suites.split(",") if s]
    if unknown := set(suites) - set(SUITES):
        raise SystemExit(f"unknown suites {sorted(unknown)}: choose from {', '.join(SUITES)}")
    out = args.out or Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-{gpu_slug()}"
    out.mkdir(parents=True, exist_ok=True)
    previous = json.loads((out / "results.json").read_text()) if args.merge and (out / "results.json").exists() else {}
    start = time.perf_counter()
    results = {"environment": environment(), "device": device, "sizes": asdict(sizes), "quick": args.quick,
               "ceilings": ceilings(device), "models": {},
               "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]])}
    print(json.dumps({"environment": results["environment"], "ceilings": results["ceilings"]}), flush=True)
    with tempfile.TemporaryDirectory() as work:
        for name in models:
            def after_suite(entry, name=name):
                results["models"][name] = entry
                this_run = {"command": results["command"], "models": list(results["models"]), "suites": suites,
                            "seconds": time.perf_counter() - start, "ceilings": results["ceilings"]}
                report.write(report.merge(previous, {**results, "runs": [this_run]}), out)
            bench_model(name, device, sizes, suites, results["ceilings"], args.cache, Path(work), after_suite)
    print((out / "results.md").read_text())
    failed = {f"{m}/{s}" for m, r in results["models"].items() for s in r.get("errors", {})}
    if failed:
        raise SystemExit(f"failed suites: {', '.join(sorted(failed))} (errors in results.json)")
    print(f"total {time.perf_counter() - start:.0f} s; results in {out}")


if __name__ == "__main__":
    main()
