"""The Triton attention kernel's launch configurations against PyTorch's flash varlen kernel (GPU).

    python benchmarks/attention_configs.py --out DIR [--shapes minilm,bert-base,qwen3-0.6b] [--batches 1x4096,4x2048]
        [--configs 64x64x4x3,128x64x8x4]   # BLOCK_M x BLOCK_N x warps x stages; default: CONFIGS

For each model's attention shape and each batch (sequences x tokens, laid out as the engine lays them: padded to
its buckets, the padding sequence included), times every configuration in CONFIGS and torch-varlen as a replayed
CUDA graph of 10 calls (a model's layers run back to back), after checking each against torch-varlen's output.
Writes DIR/attention-configs.json and prints the fastest configuration per batch; kernels/cuda/triton_attention.py's
launch_config is read off it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from common import cuda_ms, environment, warm_gpu
from embedpipe.kernels.attention import AttentionSpec
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.cuda.attention import TorchVarlenAttention
from embedpipe.kernels.cuda.triton_attention import LaunchConfig, varlen_attention

SPECS = {"minilm": AttentionSpec(12, 12, 32, False), "bert-base": AttentionSpec(12, 12, 64, False),
         "qwen3-0.6b": AttentionSpec(16, 8, 128, True)}
BATCHES = ((1, 16), (1, 128), (1, 512), (8, 256), (64, 512), (1, 4096), (4, 2048))
CONFIGS = [LaunchConfig(*c) for c in (
    (16, 32, 4, 2), (16, 64, 4, 2), (16, 128, 4, 2), (16, 64, 4, 3), (32, 32, 4, 2), (32, 64, 4, 2), (32, 64, 4, 3),
    (64, 32, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 4, 2), (64, 64, 8, 3), (128, 32, 8, 2),
    (128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2))]
CALLS = 10


def graph_ms(fn) -> float:
    """Device ms per call of fn, replayed as a graph of CALLS calls."""
    fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    return cuda_ms(graph.replay, 20) / CALLS


def bench_batch(spec: AttentionSpec, num_seqs: int, length: int, configs: list[LaunchConfig]) -> dict:
    batch = pack([[1] * length] * num_seqs, BucketPolicy())
    tokens = batch.key[0]
    q = torch.randn(tokens, spec.num_heads, spec.head_dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(tokens, spec.num_kv_heads, spec.head_dim, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    varlen = TorchVarlenAttention(spec, max_seqlen=8192)
    key = varlen.graph_key(batch)
    cu = batch.cu_seqlens.cuda()
    varlen.plan(batch.cu_seqlens, batch.num_seqs, key, cu)
    want = varlen.forward(q, k, v)
    real = int(batch.cu_seqlens[batch.num_seqs])
    max_q = key[2]
    row = {"tokens": tokens, "max_q": max_q, "torch-varlen": graph_ms(lambda: varlen.forward(q, k, v)), "triton": {}}
    for config in configs:
        name = f"{config.block_m}x{config.block_n} w{config.num_warps} s{config.num_stages}"
        try:
            got = varlen_attention(q, k, v, cu, max_q, spec.causal, spec.scale, config)
            cos = torch.nn.functional.cosine_similarity(got[:real].float().flatten(1), want[:real].float().flatten(1))
            if cos.min().item() < 0.999:
                row["triton"][name] = f"differs (min cosine {cos.min().item():.4f})"
                continue
            row["triton"][name] = graph_ms(lambda: varlen_attention(q, k, v, cu, max_q, spec.causal, spec.scale,
                                                                    config))
        except Exception as error:  # noqa: BLE001 - e.g. out of shared memory for this configuration
            row["triton"][name] = " ".join(f"{type(error).__name__}: {error}".split())[:200]
    timed = {n: ms for n, ms in row["triton"].items() if isinstance(ms, float)}
    row["best"] = min(timed, key=timed.get) if timed else None
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default=",".join(SPECS))
    parser.add_argument("--batches", default=",".join(f"{n}x{length}" for n, length in BATCHES))
    parser.add_argument("--configs", help="BLOCK_MxBLOCK_NxWARPSxSTAGES,... (default: the module's CONFIGS)")
    args = parser.parse_args()
    batches = [tuple(int(n) for n in b.split("x")) for b in args.batches.split(",")]
    configs = ([LaunchConfig(*(int(n) for n in c.split("x"))) for c in args.configs.split(",")] if args.configs
               else CONFIGS)
    warm_gpu(1.0)
    results = {"environment": environment(), "calls_per_graph": CALLS, "shapes": {}}
    for name in args.shapes.split(","):
        spec = SPECS[name]
        for num_seqs, length in batches:
            row = bench_batch(spec, num_seqs, length, configs)
            results["shapes"].setdefault(name, {})[f"{num_seqs}x{length}"] = row
            best = row["best"]
            print(f"{name:10s} {num_seqs}x{length:<5d} varlen {row['torch-varlen'] * 1e3:8.1f} us  triton best "
                  f"{best} {row['triton'][best] * 1e3 if best else float('nan'):8.1f} us", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "attention-configs.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
