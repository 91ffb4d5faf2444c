"""The projections before an add-and-norm (BERT's attention and FFN outputs, Qwen3's o_proj and down_proj): cuBLAS,
then the norm kernel (the engine's path before kernels/cuda/triton_split_k.py) against the split-K partial sums that
the norm kernel adds up, per model shape and token count, on one GPU:

    python benchmarks/split_k_bench.py --out split-k.json [--tokens 64,128,256,512,1024,2048] [--sweep] [--launch]

Each variant (matmul + norm, the pair the engine runs) is captured in one CUDA graph, each call on its own copy of
the weights (>= 120 MB in all: they come from HBM, as a model's layers' do), and replayed: device time per call
(common.graphed_ms). "split" is split_config's pick; --sweep also times other tiles and split counts (split_config
is read off them), --launch split_config's tiles with other warps and stages (common.LAUNCHES). Before timing,
each variant's output is compared with the float32 reference.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

import torch
import torch.nn.functional as F

from common import LAUNCHES, graphed_ms, hbm_weight_copies, warm_gpu
from embedpipe.kernels.cuda import triton_ops, triton_split_k
from embedpipe.kernels.cuda.triton_split_k import SplitConfig, split_config
from embedpipe.kernels.cuda.triton_linear import sm_count
from embedpipe.kernels.ops import TorchOps

SHAPES = {  # name: (output N, input K, norm, bias)
    "bert-base o": (768, 768, "layer", True),
    "bert-base ffn2": (768, 3072, "layer", True),
    "qwen3-0.6b o": (1024, 2048, "rms", False),
    "qwen3-0.6b down": (1024, 3072, "rms", False),
    "minilm o": (384, 384, "layer", True),
    "minilm ffn2": (384, 1536, "layer", True),
}
# 64 x 128 and 128 x 64 tiles were slower at BERT-base's o (2026-12-06, call 2)
TILES = ((64, 64, 64), (64, 32, 64), (64, 32, 128), (64, 64, 128))
SPLITS = (1, 2, 3, 4, 6, 8)


def run_norm(x, w, b, r, norm, gamma, beta, config: SplitConfig | None):
    """The engine's pair: cuBLAS then the norm (config None), or the partial sums then the norm adding them up."""
    if config is None:
        h = F.linear(x, w, b)
        return (triton_ops.TritonOps.add_layer_norm(h, r, gamma, beta, 1e-12) if norm == "layer"
                else triton_ops.TritonOps.add_rms_norm(h, r, gamma, 1e-6)[0])
    parts = triton_split_k.partials(x, w, config)
    return (triton_ops._add_layer_norm(parts, b, x.dtype, r, gamma, beta, 1e-12) if norm == "layer"
            else triton_ops._add_rms_norm(parts, b, x.dtype, r, gamma, 1e-6)[0])


def reference(x, w, b, r, norm, gamma, beta):
    f = (lambda t: None if t is None else t.float())
    if norm == "layer":
        return TorchOps.linear_add_layer_norm(f(x), f(w), f(b), f(r), f(gamma), f(beta), 1e-12)
    return TorchOps.linear_add_rms_norm(f(x), f(w), f(b), f(r), f(gamma), 1e-6)[0]


def candidates(m, n, k, sweep: bool, launch: bool) -> dict[str, SplitConfig | None]:
    pick = split_config(m, n, k, sm_count(torch.device("cuda")))
    out = {"cublas+norm": None, "split": pick}
    if launch:
        for warps, stages in LAUNCHES:
            if (warps, stages) != (pick.num_warps, pick.num_stages):
                out[f"split w{warps} s{stages}"] = dataclasses.replace(pick, num_warps=warps, num_stages=stages)
    if sweep:
        for bm, bn, bk in TILES:
            for s in SPLITS:
                if k // bk >= s:
                    out[f"split {bm}x{bn}x{bk} s{s}"] = SplitConfig(bm, bn, bk, s)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="split-k.json")
    parser.add_argument("--tokens", default="64,128,256,512,1024,2048")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--launch", action="store_true", help="split_config's tiles with other warps and stages")
    args = parser.parse_args()
    torch.manual_seed(0)
    clocks = warm_gpu(2.0)
    rows = []
    for shape in args.shapes.split(","):
        n, k, norm, has_bias = SHAPES[shape]
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        b = (torch.randn(n, device="cuda") * 0.1).to(torch.bfloat16) if has_bias else None
        gamma = (torch.randn(n, device="cuda") * 0.1 + 1).to(torch.bfloat16)
        beta = (torch.randn(n, device="cuda") * 0.1).to(torch.bfloat16)
        copies = hbm_weight_copies(w, b)
        for m in map(int, args.tokens.split(",")):
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            r = torch.randn(m, n, device="cuda").to(torch.bfloat16)
            ref = reference(x, w, b, r, norm, gamma, beta)
            for name, config in candidates(m, n, k, args.sweep, args.launch).items():
                try:
                    y = run_norm(x, w, b, r, norm, gamma, beta, config)
                    calls = [lambda wb=wb, config=config: run_norm(x, *wb, r, norm, gamma, beta, config)
                             for wb in copies]
                    row = {"shape": shape, "tokens": m, "variant": name, "config": None if config is None
                           else config.__dict__, "us": 1e3 * graphed_ms(None, calls=calls),
                           "max_err_vs_fp32": (y.float() - ref).abs().max().item()}
                except Exception as exc:  # a tile that does not compile here is reported, not fatal
                    row = {"shape": shape, "tokens": m, "variant": name, "error": repr(exc)[:200]}
                rows.append(row)
                print(json.dumps(row), flush=True)
            with open(args.out, "w") as f:  # after each size: a run cut short keeps what it measured
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "clocks": clocks,
                           "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
