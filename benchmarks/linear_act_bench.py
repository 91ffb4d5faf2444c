"""The feed-forward block's first matmul and its activation, fused (kernels/cuda/triton_linear.py) or not (cuBLAS,
then the activation kernel the engine ran before), per model shape and token count, on one GPU:

    python benchmarks/linear_act_bench.py --out linear-act.json [--sweep]

Each variant is captured 20 times in one CUDA graph and replayed (the engine replays graphs too): device time per
call (common.graphed_ms). --sweep also times every candidate tile of the fused kernel (tile_config's
table comes from it). Before timing, each variant's output is compared with the float32 reference.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from common import graphed_ms, warm_gpu
from embedpipe.kernels.cuda.triton_linear import TileConfig, linear_act, linear_silu_mul, tile_config
from embedpipe.kernels.cuda.triton_ops import TritonOps
from embedpipe.kernels.ops import TorchOps

SHAPES = {  # name: (intermediate N, hidden K, gated)
    "minilm": (1536, 384, False),
    "bert-base": (3072, 768, False),
    "qwen3-0.6b": (3072, 1024, True),
}
TOKENS = (64, 128, 2048, 32768)
CANDIDATES = [TileConfig(*c) for c in (
    (64, 64, 64, 8, 4, 4), (64, 32, 128, 8, 4, 3), (64, 128, 64, 8, 4, 4), (128, 64, 64, 8, 4, 4),
    (128, 128, 64, 8, 8, 4), (128, 128, 64, 8, 4, 4), (128, 256, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3))]


def variants(x, w, b, gated: bool, sweep: bool):
    """name -> callable; the first is the engine's unfused path (the baseline)."""
    if gated:
        out = {"cublas+silu_mul": lambda: TritonOps.silu_and_mul(F.linear(x, w)),
               "fused": lambda: linear_silu_mul(x, w)}
    else:
        out = {"cublas+gelu": lambda: F.gelu(F.linear(x, w, b)),
               "cublasLt-gelu-tanh": lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True),
               "fused": lambda: linear_act(x, w, b, "gelu")}
    if sweep:
        for c in CANDIDATES:
            name = f"fused {c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}"
            out[name] = ((lambda c=c: linear_silu_mul(x, w, c)) if gated
                         else (lambda c=c: linear_act(x, w, b, "gelu", c)))
    return out


def reference(x, w, b, gated: bool):
    """The engine's reference ops (TorchOps) in float32."""
    if gated:
        return TorchOps.linear_silu_mul(x.float(), w.float())
    return TorchOps.linear_act(x.float(), w.float(), b.float(), "gelu")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="linear-act.json")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args()
    torch.manual_seed(0)
    clocks = warm_gpu(2.0)
    rows = []
    for shape in args.shapes.split(","):
        n, k, gated = SHAPES[shape]
        w = torch.randn(2 * n if gated else n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        b = None if gated else torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1
        for m in TOKENS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = reference(x, w, b, gated)
            base = None
            for name, fn in variants(x, w, b, gated, args.sweep).items():
                try:
                    y = fn()
                    base = y if base is None else base
                    row = {"shape": shape, "tokens": m, "variant": name, "us": 1e3 * graphed_ms(fn),
                           "max_err_vs_fp32": (y.float() - ref).abs().max().item(),
                           "max_diff_vs_unfused": (y.float() - base.float()).abs().max().item()}
                except Exception as exc:  # a tile that does not compile here is reported, not fatal
                    row = {"shape": shape, "tokens": m, "variant": name, "error": repr(exc)[:200]}
                rows.append(row)
                print(json.dumps(row), flush=True)
            print(f"  tile_config({m}, gated={gated}) = {tile_config(m, gated)}")
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "clocks": clocks,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
