"""The Triton attention kernel's launch configurations against PyTorch's flash varlen kernel (GPU).

    python benchmarks/attention_configs.py --out DIR [--shapes minilm,bert-base,qwen3-0.6b] [--batches 1x4096,4x2048]
        [--configs 64x64x4x3,128x64x8x4]   # BLOCK_M x BLOCK_N x warps x stages [x heads]; default: CONFIGS
        [--fold]                           # Qwen3's q/k norm and RoPE applied as q and k load (QKNormRope)

For each model's attention shape and each batch (sequences x tokens, laid out as the engine lays them: padded to
its buckets, the padding sequence included), times every configuration in CONFIGS and torch-varlen as a replayed
CUDA graph of 10 calls (a model's layers run back to back), after checking each against torch-varlen's output.
Writes DIR/attention-configs.json and prints the fastest configuration per batch; kernels/cuda/triton_attention.py's
launch_config is read off it. --fold (shapes with a head_dim of 128: Qwen3): q and k come raw out of the QKV
projection and every configuration norms and rotates them as it loads them, checked against TritonOps.qk_norm_rope
then torch-varlen; "unfolded" times TritonOps.qk_norm_rope then launch_config's unfolded kernel, the
engine's other way.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from common import cuda_ms, environment, warm_gpu
from embedpipe.kernels.attention import AttentionSpec, QKNormRope
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.cuda.attention import TorchVarlenAttention
from embedpipe.kernels.cuda.triton_attention import LaunchConfig, launch_config, stacked_heads, varlen_attention
from embedpipe.kernels.cuda.triton_ops import TritonOps
from embedpipe.kernels.models.layers import RotaryEmbedding
from embedpipe.kernels.ops import TorchOps

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


def bench_batch(spec: AttentionSpec, num_seqs: int, length: int, configs: list[LaunchConfig], fold: bool) -> dict:
    batch = pack([[1] * length] * num_seqs, BucketPolicy())
    tokens = batch.key[0]
    # views of one [T, (H + 2 Hkv) D] projection output, as the engine's q, k and v
    qkv = torch.randn(tokens, (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim, device="cuda",
                      dtype=torch.bfloat16)
    q, k, v = (t.view(tokens, -1, spec.head_dim) for t in qkv.split(
        [spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim], 1))
    varlen = TorchVarlenAttention(spec, max_seqlen=8192)
    key = varlen.graph_key(batch)
    cu = batch.cu_seqlens.cuda()
    varlen.plan(batch.cu_seqlens, batch.num_seqs, key, cu)
    real = int(batch.cu_seqlens[batch.num_seqs])
    max_q = key[2]
    fold_args, q_ref, k_ref = {}, q, k  # the reference's q and k: with the fold, normed and rotated first
    if fold:
        rope, (q_ref, k_ref), unfolded = _fold_inputs(spec, qkv, cu, max_q)
        fold_args = {"qk_norm_rope": rope}
    want = varlen.forward(q_ref, k_ref, v)
    row = {"tokens": tokens, "max_q": max_q, "torch-varlen": graph_ms(lambda: varlen.forward(q_ref, k_ref, v))}
    if fold:
        row["unfolded"] = graph_ms(unfolded)
    row["triton"] = {}
    for config in configs:
        heads = stacked_heads(config, spec.num_heads // spec.num_kv_heads)  # what runs, not what was asked
        name = f"{config.block_m}x{config.block_n} w{config.num_warps} s{config.num_stages}" + (
            f" h{heads}" if heads > 1 else "")
        if name in row["triton"]:
            continue  # asked for more heads than the group holds: timed already
        try:
            got = varlen_attention(q, k, v, cu, max_q, spec.causal, spec.scale, config, **fold_args)
            cos = torch.nn.functional.cosine_similarity(got[:real].float().flatten(1), want[:real].float().flatten(1))
            if cos.min().item() < 0.999:
                row["triton"][name] = f"differs (min cosine {cos.min().item():.4f})"
                continue
            row["triton"][name] = graph_ms(lambda: varlen_attention(q, k, v, cu, max_q, spec.causal, spec.scale,
                                                                    config, **fold_args))
        except Exception as error:  # noqa: BLE001 - e.g. out of shared memory for this configuration
            row["triton"][name] = " ".join(f"{type(error).__name__}: {error}".split())[:200]
    timed = {n: ms for n, ms in row["triton"].items() if isinstance(ms, float)}
    row["best"] = min(timed, key=timed.get) if timed else None
    return row


def _fold_inputs(spec: AttentionSpec, qkv, cu, max_q: int):
    """(the QKNormRope the kernel applies, (q, k) normed and rotated as the reference takes them, a call running the
    engine's unfolded way: TritonOps.qk_norm_rope on a copy of qkv, then the unfolded kernel), for the raw
    projection output qkv [T, (H + 2 Hkv) D]."""
    tokens, dim = qkv.shape[0], spec.head_dim
    rotary = RotaryEmbedding(dim, 8192, 1_000_000.0).to("cuda", qkv.dtype)  # the engine's model.to(dtype) casts them
    q_weight, k_weight = (1 + 0.1 * torch.randn(dim, device="cuda", dtype=qkv.dtype) for _ in range(2))
    eps = 1e-6
    positions, _ = TorchOps.token_layout(cu, tokens)
    # the engine's separate kernel: the fold rounds as it does (TorchOps' bf16 steps differ by a few units in the
    # last place, which moved a random row's attention to a cosine of 0.985)
    q_ref, k_ref, _ = TritonOps.qk_norm_rope(qkv.clone(), q_weight, k_weight, positions, rotary.cos, rotary.sin,
                                            spec.num_heads, spec.num_kv_heads, dim, eps)
    fold = QKNormRope(q_weight, k_weight, eps, rotary.cos, rotary.sin)
    scratch = qkv.clone()  # normed and rotated in place at every call: the timing does not depend on the values
    config = launch_config(max_q, folded=False)

    def unfolded():
        q2, k2, v2 = TritonOps.qk_norm_rope(scratch, q_weight, k_weight, positions, rotary.cos, rotary.sin,
                                            spec.num_heads, spec.num_kv_heads, dim, eps)
        return varlen_attention(q2, k2, v2, cu, max_q, spec.causal, spec.scale, config)

    return fold, (q_ref, k_ref), unfolded


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default=",".join(SPECS))
    parser.add_argument("--batches", default=",".join(f"{n}x{length}" for n, length in BATCHES))
    parser.add_argument("--configs", help="BLOCK_MxBLOCK_NxWARPSxSTAGES[xHEADS],... (default: the module's CONFIGS)")
    parser.add_argument("--fold", action="store_true", help="q/k norm and RoPE folded into the kernel (Qwen3)")
    args = parser.parse_args()
    batches = [tuple(int(n) for n in b.split("x")) for b in args.batches.split(",")]
    if args.fold and any(SPECS[name].head_dim != 128 for name in args.shapes.split(",")):
        parser.error("--fold times Qwen3's q/k norm and RoPE: --shapes qwen3-0.6b")
    configs = ([LaunchConfig(*(int(n) for n in c.split("x"))) for c in args.configs.split(",")] if args.configs
               else CONFIGS)
    warm_gpu(1.0)
    results = {"environment": environment(), "calls_per_graph": CALLS, "fold": args.fold, "shapes": {}}
    for name in args.shapes.split(","):
        spec = SPECS[name]
        for num_seqs, length in batches:
            row = bench_batch(spec, num_seqs, length, configs, args.fold)
            results["shapes"].setdefault(name, {})[f"{num_seqs}x{length}"] = row
            best = row["best"]
            unfolded = f"  unfolded {row['unfolded'] * 1e3:6.1f} us" if args.fold else ""
            print(f"{name:10s} {num_seqs}x{length:<5d} varlen {row['torch-varlen'] * 1e3:8.1f} us{unfolded}  triton "
                  f"best {best} {row['triton'][best] * 1e3 if best else float('nan'):8.1f} us", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "attention-configs.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
