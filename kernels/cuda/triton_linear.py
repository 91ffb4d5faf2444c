"""A feed-forward block's first matmul with its activation in the epilogue (CUDA, Triton):

- `linear_act(x, w, b, act)` = act(x @ w.T + b)               BERT's intermediate.dense + its hidden_act
- `linear_silu_mul(x, w)`    = silu(x @ g.T) * (x @ u.T)     Qwen3's gate_up_proj + SiLU-and-mul; w = [g; u]

Why: the activation pass read and wrote the [T, intermediate] tensor once more than the matmul did: on the H200,
BERT-base 64 x 512 spent 1.6 of 12.6 ms of device time in the separate GELU kernel and Qwen3-0.6B 4.0 of 69 ms in
SiLU-and-mul (benchmarks/results/2026-11-29-h200-engine). cuBLASLt's GELU epilogue is the tanh approximation, not
the erf form BERT checkpoints name "gelu"; here the epilogue is the reference's own arithmetic: the matmul output
rounded to the activation dtype (where transformers rounds it), the activation in float32, one rounding to store.

Tiles: each program makes a [BLOCK_M, BLOCK_N] output tile (for silu-mul, the gate's and the up's tiles of the
same columns) over the whole of K, moved by TMA descriptors, programs grouped GROUP_M row tiles at a time so a band
of x stays in L2; above 256 tokens the gated form runs persistent (one program per SM). On the H200 the gated form
beats cuBLAS + SiLU-and-mul and runs in the engine (TOKEN_RANGES), as the plain form does for small projections at
a batch of a few hundred tokens (IDENTITY_MAX_WEIGHT); cuBLASLt's GELU epilogue beats the GELU forms, so BERT runs
that (CUBLASLT_GELU).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from embedpipe.kernels.cuda import pdl


@dataclass(frozen=True)
class TileConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    persistent: bool = False  # one program per SM looping over the tiles


def tile_config(num_tokens: int, gated: bool) -> TileConfig:
    """The tiles for a token count: the fastest of benchmarks/linear_act_bench.py --sweep on the H200 (2026-12-05,
    results/2026-12-05-h200-fused-activation: BERT-base and Qwen3-0.6B shapes at 128 and 32,768 tokens)."""
    if num_tokens <= 256:
        return TileConfig(64, 32, 128, 8, 4, 3)
    if gated:  # two accumulators per program
        return TileConfig(128, 128, 64, 8, 8, 4, persistent=True)
    return TileConfig(128, 256, 64, 8, 8, 3)


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of tile number pid: GROUP_M row tiles share each column sweep (L2 reuse of x)."""
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_rows, (pid % per_group) // group_rows


ACT_CODES = {"gelu": 0, "gelu_new": 1, "gelu_pytorch_tanh": 1, "gelu_fast": 1, "relu": 2,
             "identity": 4}  # of activations.py
SILU_MUL = 3


@triton.jit
def _activation(h, ACT: tl.constexpr):
    """h float32 -> act(h) float32: 0 exact (erf) GELU, 1 tanh GELU, 2 ReLU, 4 none, as torch computes them in
    float32."""
    if ACT == 0:
        return 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    elif ACT == 1:
        cube = h * h * h
        inner = 0.7978845608028654 * (h + 0.044715 * cube)
        return h / (1.0 + tl.exp(-2.0 * inner))  # 0.5 * h * (1 + tanh(inner)), without its cancellation below -4.5
    elif ACT == 2:
        return tl.maximum(h, 0.0, propagate_nan=tl.PropagateNan.ALL)  # torch's relu keeps NaN
    else:
        return h


@triton.jit
def _epilogue(acc, acc_up, B, cols, N, dtype: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The float32 accumulators -> the output tile (float32, to be stored in dtype): rounded where the reference
    (transformers' modules in dtype) rounds."""
    if ACT == 3:  # SILU_MUL
        gate = acc.to(dtype).to(tl.float32)
        silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
        return silu * acc_up.to(dtype).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(B + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    return _activation(acc.to(dtype).to(tl.float32), ACT)


@triton.jit
def _linear_act_kernel(x_desc, w_desc, out_desc, B, W, stride_w, M, N, K, up_rows,
                       ACT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PDL: tl.constexpr, LINES: tl.constexpr):
    """Out [M, N] = act(X [M, K] @ W[:N].T (+ B)); ACT == SILU_MUL: silu(X @ W[:N].T) * (X @ W[up_rows:][:N].T).
    One program per output tile; tiles moved by TMA descriptors (x [BLOCK_M, BLOCK_K], W [BLOCK_N, BLOCK_K],
    Out [BLOCK_M, BLOCK_N]): rows and columns past the tensors' ends load as zeros and are not stored. PDL: the
    tile's weight rows (W's, stride_w apart: LINES 128-byte lines of each) asked of L2 while the kernel before runs
    (pdl.py)."""
    tile_m, tile_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    if PDL:
        pdl.prefetch_weight_tile(W, stride_w, tile_n * BLOCK_N, N, 0, K, BLOCK_N, LINES)
        if ACT == 3:  # SILU_MUL: the up rows of the same columns
            pdl.prefetch_weight_tile(W, stride_w, up_rows + tile_n * BLOCK_N, up_rows + N, 0, K, BLOCK_N, LINES)
    pdl.wait(PDL)
    _output_tile(x_desc, w_desc, out_desc, B, N, K, up_rows, tile_m * BLOCK_M, tile_n * BLOCK_N,
                 ACT, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _linear_act_persistent_kernel(x_desc, w_desc, out_desc, B, M, N, K, up_rows,
                                  ACT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                                  PDL: tl.constexpr):
    """_linear_act_kernel with one program per SM, each taking every num_programs-th tile: no launch tail, and the
    loads of a program's next tile can start while it stores the last. Nothing prefetched (many tiles a program)."""
    pdl.wait(PDL)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0)):
        tile_m, tile_n = _tile_of(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        _output_tile(x_desc, w_desc, out_desc, B, N, K, up_rows, tile_m * BLOCK_M, tile_n * BLOCK_N,
                        ACT, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _output_tile(x_desc, w_desc, out_desc, B, N, K, up_rows, off_m, off_n, ACT: tl.constexpr,
                 HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One [BLOCK_M, BLOCK_N] output tile at (off_m, off_n) over the whole of K."""
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = x_desc.load([off_m, k])
        acc = tl.dot(x, w_desc.load([off_n, k]).T, acc)
        if ACT == 3:  # the up rows' tile of the same columns (a gate tile past N reads up rows: never stored)
            acc_up = tl.dot(x, w_desc.load([up_rows + off_n, k]).T, acc_up)
    dtype = out_desc.dtype
    out = _epilogue(acc, acc_up, B, off_n + tl.arange(0, BLOCK_N), N, dtype, ACT, HAS_BIAS)
    out_desc.store([off_m, off_n], out.to(dtype))


# The GELUs TritonOps runs in half precision in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_GELU_BIAS, through
# torch._addmm_activation; float32 keeps the exact form: it is the reference): the tanh form on the float32
# accumulator, for BERT's erf "gelu" too (as text-embeddings-inference does). It is within 4.8e-4 of the erf form
# (at |h| = 2.7) plus its tanh's error, a 2^-11 relative one at most (tests/kernels/test_fused_ops.py), and out of
# sight in the embeddings (cos >= 0.999 to the float32 reference: tests/kernels/test_gpu_engine.py). Faster than
# the matmul then the GELU at every token count and than this kernel's erf epilogue (H200, 2026-12-05, BERT-base
# 768 -> 3,072: 5.7 against 7.3 and 6.4 us at 128 tokens, 310 against 377 and 405 us at 32,768; the engine at
# 64 x 512: 2.70 against 2.47 M tokens/s).
CUBLASLT_GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")


# The token counts (least, most) at which TritonOps runs this kernel instead of cuBLAS (then the activation kernel),
# per epilogue: "activation" (GELU, ReLU), "silu_mul", "identity" (the plain linears: in the engine, the QKV
# projections; the add-and-norm ones go to triton_split_k up to 256 tokens); None: never. From
# benchmarks/linear_act_bench.py --sweep on the H200 (2026-12-05): SiLU-and-mul wins from 64 tokens on (Qwen3-0.6B
# 1,024 -> 2 x 3,072: 7.3 against 8.1 us at 64 tokens, 725 against 767 at 32,768); GELU loses to cuBLASLt's epilogue
# (above). The plain projections lost to cuBLAS there kernel by kernel (1.05-1.7x slower, timed apart), but in the
# engine's graph, launched with PDL behind the norm kernel, the small ones won at 16 and 128 tokens
# (IDENTITY_MAX_WEIGHT); the range ends where PDL's does (pdl.MAX_TOKENS).
TOKEN_RANGES: dict[str, tuple[int, int] | None] = {"activation": None, "silu_mul": (64, 1 << 30),
                                                   "identity": (1, 256)}

# The largest weight (N x K elements) a plain projection runs in this kernel with. Replayed whole-model graphs, 3
# rounds of fresh processes: on an H100 (results/2026-12-06-h200-qwen-chain, call 4, "qkv") BERT-base's QKV (2,304 x
# 768) 1 x 128 0.333 -> 0.327 ms, 1 x 16 0.300 -> 0.289; MiniLM-L6's (1,152 x 384) 1 x 128 0.117 -> 0.110;
# Qwen3-0.6B's (4,096 x 1,024) lost, 1 x 128 1.103 -> 1.264 ms, 1 x 16 0.874 -> 0.921: a 64 x 32 tile over the whole
# of K reads a larger weight slower than cuBLAS, and so did four larger tiles (64 x 64, 128 x 64, 64 x 128, 128 x
# 128; H100, 1 x 128 1.116 -> 1.262-1.348 ms: results/2026-12-06-h200-qkv-pdl, call 1). On the H200
# (results/2026-12-06-h200-launch, call 6, this bound) BERT-base 0.326 -> 0.315 and 0.293 -> 0.281, MiniLM-L6
# 0.116 -> 0.109 and 0.103 -> 0.096. Between 1.8 M and 4.2 M nothing was measured.
IDENTITY_MAX_WEIGHT = 2 << 20


@functools.cache
def has_tma(device: torch.device) -> bool:
    """The kernel moves its tiles by TMA (Hopper on); Triton's interpreter (CPU) runs it too."""
    return device.type == "cpu" or torch.cuda.get_device_capability(device) >= (9, 0)


def fused_fits(x: torch.Tensor, weight: torch.Tensor, act: str, bias: torch.Tensor | None = None) -> bool:
    """Whether the fused kernel can run a call: x [T, K] and weight [N, K] of one half-precision dtype (float32 would
    run tf32 dots), an activation it knows ("silu_mul" for linear_silu_mul), K a multiple of the BLOCK_K tile_config
    picks for the token count, rows contiguous, a bias [N] if any; for TMA, a GPU that has it, and rows (x's,
    weight's, the output's) and bases 16-byte aligned."""
    n = weight.shape[0] // 2 if act == "silu_mul" else weight.shape[0]
    return (tma_operands_fit(x, weight) and (act in ACT_CODES or act == "silu_mul")
            and x.shape[1] % tile_config(x.shape[0], gated=act == "silu_mul").block_k == 0
            and n % 8 == 0  # the output's rows: 8 half-precision units, 16 bytes
            and (bias is None or (bias.shape == (weight.shape[0],) and bias.stride(0) == 1)))


def tma_operands_fit(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """x [T, K] and weight [N, K] as the Triton matmuls' TMA descriptors take them: one half-precision dtype (float32
    would run tf32 dots), rows contiguous, rows and bases 16-byte aligned (8 half-precision units), a GPU with TMA."""
    return (x.dim() == 2 and weight.dim() == 2 and x.shape[1] == weight.shape[1]
            and x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == x.dtype
            and x.stride(1) == 1 and weight.stride(1) == 1 and x.stride(0) % 8 == 0 and weight.stride(0) % 8 == 0
            and x.data_ptr() % 16 == 0 and weight.data_ptr() % 16 == 0 and has_tma(x.device))


def fused_takes(x: torch.Tensor, weight: torch.Tensor, act: str, bias: torch.Tensor | None = None) -> bool:
    """Whether TritonOps runs a call in this kernel: it fits, with a token count in its epilogue's TOKEN_RANGES (a
    plain projection: and a weight of at most IDENTITY_MAX_WEIGHT elements)."""
    tokens = TOKEN_RANGES[act if act in ("identity", "silu_mul") else "activation"]
    if act == "identity" and weight.numel() > IDENTITY_MAX_WEIGHT:
        return False
    return tokens is not None and tokens[0] <= x.shape[0] <= tokens[1] and fused_fits(x, weight, act, bias)


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def _launch(x: torch.Tensor, weight: torch.Tensor, bias, n: int, act: int, config: TileConfig | None):
    m, k = x.shape
    config = config or tile_config(m, gated=act == SILU_MUL)
    if k % config.block_k or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"linear_act needs K ({k}) a multiple of {config.block_k} and rows contiguous")
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    grid = (min(tiles, sm_count(x.device)) if config.persistent else tiles,)
    meta = dict(ACT=act, HAS_BIAS=bias is not None, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                BLOCK_K=config.block_k, GROUP_M=config.group_m, num_warps=config.num_warps,
                num_stages=config.num_stages)
    b = bias if bias is not None else weight
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    descs = (TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(weight, [bn, bk]),
             TensorDescriptor.from_tensor(out, [bm, bn]), b)
    launch = pdl.options(x)
    if config.persistent:  # many tiles a program: no weight tile to prefetch
        _linear_act_persistent_kernel[grid](*descs, m, n, k, n, **meta, **launch)
    else:  # the weight's own pointer and row stride, for the prefetch
        _linear_act_kernel[grid](*descs, weight, weight.stride(0), m, n, k, n, LINES=pdl.prefetch_lines(k, launch),
                                 **meta, **launch)
    return out


def linear_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act: str,
               config: TileConfig | None = None) -> torch.Tensor:
    """x [M, K], weight [N, K], bias [N] | None -> act(x @ weight.T + bias) [M, N] in x's dtype; act a hidden_act
    name of ACT_CODES."""
    return _launch(x, weight, bias, weight.shape[0], ACT_CODES[act], config)


def linear_silu_mul(x: torch.Tensor, weight: torch.Tensor, config: TileConfig | None = None) -> torch.Tensor:
    """x [M, K], weight [2 * I, K] (gate rows, then up rows) -> silu(x @ gate.T) * (x @ up.T) [M, I]."""
    return _launch(x, weight, None, weight.shape[0] // 2, SILU_MUL, config)
