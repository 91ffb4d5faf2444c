"""Where run.py's batch-1 call spends ~200 us more host time than latency_ab.py's step (issue 19; this folder's
README). One configuration a process:

    python gap.py --model qwen3-0.6b --tokens 128 [--second-engine] [--idle-peers 2] --out FILE.json

`--second-engine`: an eager engine of the same model beside the timed one (run.py's "ours" worker holds one, its
ours-no-graphs ablation); `--idle-peers N`: N processes holding a CUDA context and the model in transformers, asleep
(run.py's peer workers wait so while ours runs). Series, in this order, each a p50 in ms:
  suite_window  run.py's timed call (suite_latency.ours_call: pack inside the call, the result as a numpy array) in
                run.py's window: after isolation.warm's matmuls and 5 untimed calls, Sizes' latency_iters calls or
                measure_seconds
  step          latency_ab.py's: step(batch packed once).result(), 300 calls after 30
  suite_call    run.py's timed call, 300 calls after 30
  pack          pack() alone
  replay        the step's graph replayed back to back (device time)
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/

from common import cuda_ms, model_folder, random_sequences, time_calls  # noqa: E402
from isolation import warm  # noqa: E402
from sizes import Sizes  # noqa: E402
from suite_latency import ours_call  # noqa: E402
from embedpipe.kernels.batch import BucketPolicy, pack  # noqa: E402
from embedpipe.kernels.engine import Engine, EngineConfig  # noqa: E402
from embedpipe.kernels.graph_cache import GraphConfig  # noqa: E402

PEER = """import sys, time, torch
from transformers import AutoModel
AutoModel.from_pretrained(sys.argv[1], dtype=torch.bfloat16).cuda().eval()
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(600)
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen3-0.6b")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--second-engine", action="store_true")
    parser.add_argument("--idle-peers", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with torch.device("cuda"):
        folder = model_folder(args.model, Path("/tmp/embedpipe-bench-models"))
    peers = [subprocess.Popen([sys.executable, "-c", PEER, str(folder)], stdout=subprocess.PIPE, text=True)
             for _ in range(args.idle_peers)]
    try:
        for peer in peers:
            if not any(line.strip() == "ready" for line in iter(peer.stdout.readline, "")):
                raise SystemExit(f"an idle peer did not start (exit {peer.wait()})")
        measure(args, folder)
    finally:
        for peer in peers:
            peer.kill()


def measure(args, folder: Path) -> None:
    engine = Engine(EngineConfig(model=str(folder), device="cuda", attention="triton"))
    other = (Engine(EngineConfig(model=str(folder), device="cuda", attention="triton",
                                 graphs=GraphConfig(enabled=False))) if args.second_engine else None)
    seqs = random_sequences(np.random.default_rng(0), 1, args.tokens)
    batch = pack(seqs, BucketPolicy())
    call = ours_call(engine)
    suite = lambda: call(seqs)
    if other is not None:
        other.step(batch).result()  # loaded and run once, as the ablation is before its series
    out = {"args": vars(args) | {"out": str(args.out)}, "clocks": warm("cuda")}
    window = Sizes()  # the full preset's: suite_latency.measure's window for ours (5 untimed, at least 20 timed)
    out["suite_window"] = statistics.median(time_calls(suite, window.latency_iters, 5, window.measure_seconds, 20))
    out["step"] = statistics.median(time_calls(lambda: engine.step(batch).result(), 300, 30))
    out["suite_call"] = statistics.median(time_calls(suite, 300, 30))
    out["pack"] = statistics.median(time_calls(lambda: pack(seqs, BucketPolicy()), 300, 30))
    out["replay"] = cuda_ms(engine.runner.captured_graph(batch).replay, 300)
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
