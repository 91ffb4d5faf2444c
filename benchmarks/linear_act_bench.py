"""The feed-forward block's first matmul and its activation, fused (kernels/cuda/triton_linear.py) or not (cuBLAS,
then the activation kernel the engine ran before), and the layer's other linears (the same kernel with no
activation, against cuBLAS), per model shape and token count, on one GPU:

    python benchmarks/linear_act_bench.py --out linear-act.json [--sweep] [--launch] [--tokens 16,128]

Each variant is captured 20 times or more in one CUDA graph and replayed (the engine replays graphs too): device
time per call (common.graphed_ms); up to 2,048 tokens each call reads its own copy of the weights (from HBM, as in
a model), above that the same one. --sweep also times every candidate tile of the fused kernel (tile_config's
table comes from it), --launch tile_config's tile with other warps and stages (common.LAUNCHES); --tokens replaces
each epilogue's token counts (TOKENS). Before timing, each variant's output is compared with the float32 reference.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

import torch
import torch.nn.functional as F

from common import LAUNCHES, graphed_ms, hbm_weight_copies, warm_gpu
from embedpipe.kernels.cuda.triton_linear import TileConfig, linear_act, linear_silu_mul, tile_config
from embedpipe.kernels.cuda.triton_ops import TritonOps
from embedpipe.kernels.ops import TorchOps

SHAPES = {  # name: (output N, input K, epilogue, bias), most telling first
    "bert-base": (3072, 768, "gelu", True),
    "qwen3-0.6b": (3072, 1024, "silu_mul", False),
    # the other linears of a layer, with no activation: is the kernel a better small-M GEMM than cuBLAS?
    "bert-base qkv": (2304, 768, "identity", True),
    "bert-base o": (768, 768, "identity", True),
    "bert-base ffn2": (768, 3072, "identity", True),
    "qwen3-0.6b qkv": (4096, 1024, "identity", False),
    "qwen3-0.6b o": (1024, 2048, "identity", False),
    "qwen3-0.6b down": (1024, 3072, "identity", False),
    "minilm": (1536, 384, "gelu", True),
}
TOKENS = {"gelu": (64, 128, 2048, 32768), "silu_mul": (64, 128, 2048, 32768), "identity": (128, 2048)}
CANDIDATES = [TileConfig(*c) for c in (  # (block_m, block_n, block_k, group_m, warps, stages, persistent)
    # the best of the 2026-12-05 sweeps (calls 1 and 2, H200) at 64-128 and at 2,048-32,768 tokens
    (64, 32, 128, 8, 4, 3), (16, 64, 64, 8, 4, 4), (32, 64, 64, 8, 4, 4), (64, 64, 64, 8, 4, 4),
    (64, 128, 64, 8, 4, 4), (128, 64, 64, 8, 4, 4), (128, 128, 64, 8, 4, 4), (128, 128, 64, 8, 8, 4),
    (128, 256, 64, 8, 8, 3), (128, 128, 128, 8, 8, 3), (256, 128, 64, 8, 8, 3),
    # persistent (one program per SM)
    (64, 64, 64, 8, 4, 4, True), (128, 128, 64, 8, 4, 4, True), (128, 128, 64, 8, 8, 4, True),
    (128, 256, 64, 8, 8, 3, True))]


def variants(x, epilogue: str, sweep: bool, launch: bool):
    """name -> callable(weight, bias); the first is the engine's unfused path (the baseline)."""
    if epilogue == "silu_mul":
        out = {"cublas+silu_mul": lambda w, b: TritonOps.silu_and_mul(F.linear(x, w)),
               "cublas alone": lambda w, b: F.linear(x, w),  # the floor an epilogue could reach
               "fused": lambda w, b: linear_silu_mul(x, w)}
    elif epilogue == "gelu":
        out = {"cublas+gelu": lambda w, b: F.gelu(F.linear(x, w, b)),
               "cublas alone": lambda w, b: F.linear(x, w, b),
               "cublasLt-gelu-tanh": lambda w, b: torch._addmm_activation(b, x, w.t(), use_gelu=True),
               "fused": lambda w, b: linear_act(x, w, b, "gelu")}
    else:
        out = {"cublas": lambda w, b: F.linear(x, w, b), "fused": lambda w, b: linear_act(x, w, b, "identity")}
    pick = tile_config(x.shape[0], gated=epilogue == "silu_mul")
    launches = [dataclasses.replace(pick, num_warps=w, num_stages=s) for w, s in LAUNCHES
                if (w, s) != (pick.num_warps, pick.num_stages)] if launch else []
    for c in (CANDIDATES if sweep else []) + launches:
        loads = " tma persistent" if c.persistent else " tma"  # the names calls 1 and 2 recorded
        name = f"fused {c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}{loads}"
        out[name] = ((lambda w, b, c=c: linear_silu_mul(x, w, c)) if epilogue == "silu_mul"
                     else (lambda w, b, c=c: linear_act(x, w, b, epilogue, c)))
    return out


def reference(x, w, b, epilogue: str):
    """The engine's reference ops (TorchOps) in float32."""
    if epilogue == "silu_mul":
        return TorchOps.linear_silu_mul(x.float(), w.float())
    return TorchOps.linear_act(x.float(), w.float(), b.float() if b is not None else None, epilogue)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="linear-act.json")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--launch", action="store_true", help="tile_config's tile with other warps and stages")
    parser.add_argument("--tokens", help="token counts, comma-separated (default: TOKENS per epilogue)")
    args = parser.parse_args()
    torch.manual_seed(0)
    clocks = warm_gpu(2.0)
    rows = []
    for shape in args.shapes.split(","):
        n, k, epilogue, has_bias = SHAPES[shape]
        gated = epilogue == "silu_mul"
        w = torch.randn(2 * n if gated else n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1 if has_bias else None
        for m in (map(int, args.tokens.split(",")) if args.tokens else TOKENS[epilogue]):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = reference(x, w, b, epilogue)
            base = None
            # up to 2,048 tokens the weights' reads weigh: each call of the graph on its own copy, >= 120 MB in all
            # (the L2 holds 60), as a model's layers each read theirs from HBM; above, the same copy 20 times
            copies = [(w, b)] * 20 if m > 2048 else hbm_weight_copies(w, b)
            count = 1 if m > 2048 else len(copies)
            for name, fn in variants(x, epilogue, args.sweep, args.launch).items():
                try:
                    y = fn(w, b)
                    base = y if base is None else base
                    calls = [lambda fn=fn, wb=wb: fn(*wb) for wb in copies]
                    row = {"shape": shape, "tokens": m, "variant": name, "us": 1e3 * graphed_ms(None, calls=calls),
                           "weight_copies": count}
                    if name != "cublas alone":  # no activation: nothing to compare
                        row.update(max_err_vs_fp32=(y.float() - ref).abs().max().item(),
                                   max_diff_vs_unfused=(y.float() - base.float()).abs().max().item())
                except Exception as exc:  # a tile that does not compile here is reported, not fatal
                    row = {"shape": shape, "tokens": m, "variant": name, "error": repr(exc)[:200]}
                rows.append(row)
                print(json.dumps(row), flush=True)
            print(f"  tile_config({m}, gated={gated}) = {tile_config(m, gated)}")
            with open(args.out, "w") as f:  # after each size: a run cut short keeps what it measured
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "clocks": clocks,
                           "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
