"""The Triton ragged attention kernel (kernels/cuda/triton_attention.py) against exact per-sequence SDPA.

Runs on a GPU (bfloat16), and on the CPU through Triton's interpreter (TRITON_INTERPRET=1, float32) when
Triton is installed; skipped otherwise. The graph-replay and model-level checks are in test_gpu_engine.py.
"""
import os

import numpy as np
import pytest
import torch

from embedpipe.kernels.attention import AttentionSpec, TorchRaggedAttention
from embedpipe.kernels.batch import BucketPolicy, pack

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton's interpreter is off (set TRITON_INTERPRET=1 before Python starts)", allow_module_level=True)

from embedpipe.kernels.cuda.attention import TritonVarlenAttention  # noqa: E402
from embedpipe.kernels.cuda.triton_attention import (LaunchConfig, launch_config, stacked_heads,  # noqa: E402
                                                     supports, varlen_attention)

DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
TOL = 1e-4 if DTYPE == torch.float32 else 2e-2  # the interpreter's float32; bfloat16 inputs on a GPU
SHAPES = [AttentionSpec(4, 4, 32, False), AttentionSpec(4, 2, 64, True), AttentionSpec(2, 1, 128, True),
          AttentionSpec(2, 2, 128, False)]


def _exact(spec, q, k, v, cu_seqlens):
    """Per-sequence SDPA in float32 over every non-empty slot, the padding sequence's too (the kernel writes its
    rows as well)."""
    exact = TorchRaggedAttention(spec)
    bounds = cu_seqlens.tolist()
    exact.spans = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return exact.forward(q.float().cpu(), k.float().cpu(), v.float().cpu())


def _qkv(spec, num_tokens, generator):
    q = torch.randn(num_tokens, spec.num_heads, spec.head_dim, generator=generator)
    k, v = (torch.randn(num_tokens, spec.num_kv_heads, spec.head_dim, generator=generator) for _ in range(2))
    return (t.to(DEVICE, DTYPE) for t in (q, k, v))


@pytest.mark.parametrize("spec", SHAPES, ids=str)
@pytest.mark.parametrize("lengths", [[1], [16], [37], [128], [5, 70, 1, 33], [200, 3], [700]])
def test_the_kernel_equals_exact_attention_within_each_sequence(spec, lengths):
    """Query blocks of 16 and 32 rows, sequences shorter than a block and spanning several, key blocks cut by a
    sequence's end, causal and bidirectional, grouped heads; padding rows and empty slots as the bucket lays them."""
    batch = pack([[1] * n for n in lengths], BucketPolicy())
    q, k, v = _qkv(spec, batch.key[0], torch.Generator().manual_seed(sum(lengths)))
    max_q = 1 << (int((batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).max()) - 1).bit_length()
    got = varlen_attention(q, k, v, batch.cu_seqlens.to(DEVICE), max_q, spec.causal, spec.scale)
    want = _exact(spec, q, k, v, batch.cu_seqlens)
    torch.testing.assert_close(got.float().cpu(), want.cpu(), atol=TOL, rtol=TOL)


def test_a_graph_keys_larger_bound_changes_nothing():
    """A replayed graph keeps its key's max_q, which may be far above a layout's longest sequence (here 10 of 512):
    the blocks past a sequence's end return, and rows outside every sequence (12-15) are never written."""
    spec = AttentionSpec(2, 2, 32, False)
    cu = torch.tensor([0, 10, 12, 12], dtype=torch.int32, device=DEVICE)
    q, k, v = _qkv(spec, 16, torch.Generator().manual_seed(0))
    config = LaunchConfig(16, 64, 4, 2)
    outputs = []
    for max_q in (16, 512):
        out = torch.full_like(q, float("nan"))
        outputs.append(varlen_attention(q, k, v, cu, max_q, False, spec.scale, config, out=out))
    torch.testing.assert_close(outputs[0][:12], outputs[1][:12], atol=0, rtol=0)
    assert not outputs[1][:12].isnan().any() and outputs[1][12:].isnan().all()


def test_the_launch_configurations_read_off_the_h200():
    """benchmarks/results/2026-12-04-h200-triton-attention/call2-configs: blocks of 16 query rows up to a 64-row
    bound, then 64 rows, with 3 stages above 128."""
    assert launch_config(16) == launch_config(64) == LaunchConfig(16, 64, 4, 2)
    assert launch_config(128) == LaunchConfig(64, 64, 4, 2)
    assert launch_config(256) == launch_config(4096) == LaunchConfig(64, 64, 4, 3)
    # with Qwen3's q/k norm and RoPE folded in, up to a 128-row bound: blocks of 16 rows, 8 warps, one stage, key
    # blocks of 64 up to 64 rows and of 128 past them (H100, results/2026-12-07-h200-gelu-splitk, calls 6-10)
    assert launch_config(16, folded=True) == launch_config(64, folded=True) == LaunchConfig(16, 64, 8, 1)
    assert launch_config(128, folded=True) == LaunchConfig(16, 128, 8, 1)
    assert launch_config(256, folded=True) == LaunchConfig(64, 64, 4, 3)


CONFIGS = [LaunchConfig(16, 32, 4, 1), LaunchConfig(16, 64, 4, 2), LaunchConfig(32, 16, 4, 2),
           LaunchConfig(64, 64, 4, 2), LaunchConfig(128, 64, 8, 3), LaunchConfig(64, 128, 4, 2),
           LaunchConfig(16, 64, 4, 1, heads=2), LaunchConfig(32, 64, 4, 2, heads=4)]  # heads stacked: up to a group


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("spec", [AttentionSpec(2, 1, 64, True), AttentionSpec(2, 2, 32, False),
                                  AttentionSpec(8, 2, 32, True), AttentionSpec(4, 2, 64, False)], ids=str)
def test_every_launch_config_gives_the_same_attention(spec, config):
    """Query blocks larger and smaller than key blocks: the unmasked whole key blocks before a causal block's first
    row, then the masked rest, with sequences longer than several blocks of each."""
    batch = pack([[1] * n for n in (300, 45, 130)], BucketPolicy())
    q, k, v = _qkv(spec, batch.key[0], torch.Generator().manual_seed(7))
    got = varlen_attention(q, k, v, batch.cu_seqlens.to(DEVICE), 512, spec.causal, spec.scale, config)
    want = _exact(spec, q, k, v, batch.cu_seqlens)
    torch.testing.assert_close(got.float().cpu(), want.cpu(), atol=TOL, rtol=TOL)


def test_a_block_stacks_whole_sets_of_one_groups_heads():
    """LaunchConfig.heads query heads of one group a block, fewer where they do not divide the group; never a count
    that is not a power of two (the kernel's stacked rows)."""
    assert [stacked_heads(LaunchConfig(16, 64, 4, 1, heads=h), 2) for h in (1, 2, 4)] == [1, 2, 2]
    assert [stacked_heads(LaunchConfig(16, 64, 4, 1, heads=h), 6) for h in (2, 4, 8)] == [2, 2, 2]
    assert stacked_heads(LaunchConfig(16, 64, 4, 1, heads=4), 7) == 1
    assert stacked_heads(LaunchConfig(16, 64, 4, 1, heads=8), 8) == 8
    for bad in (0, 3, -2):
        with pytest.raises(ValueError, match="power of two"):
            LaunchConfig(16, 64, 4, 1, heads=bad)


def test_the_shapes_the_kernel_runs():
    assert supports(32, 12, 12) and supports(64, 12, 12) and supports(128, 16, 8)
    assert not supports(80, 8, 8)  # not a power of two
    assert not supports(256, 8, 8)  # its accumulator would not fit the registers
    assert not supports(64, 12, 5)  # heads not in whole groups
    with pytest.raises(ValueError, match="head_dim 16-128"):
        TritonVarlenAttention(AttentionSpec(8, 8, 96, False), 512)


def test_its_graph_keys_bucket_the_longest_sequence_from_64_rows():
    """A 16-token query is keyed (and its grid sized) by 64 rows, not by torch-varlen's 128: blocks of 16 rows; two
    20-token queries (the longest sequence: the padding one, 24 tokens) by 64 rows too, not by a key of 32 of their
    own."""
    attn = TritonVarlenAttention(AttentionSpec(4, 4, 32, False), 512)
    keys = [attn.graph_key(pack(batch, BucketPolicy())) for batch in
            ([[1] * 9], [[1] * 16], [[1] * 100], [[1] * 300], [[1] * 20, [1] * 20])]
    # (padded tokens, slots, max_q); 300 tokens: the bucket, 512, is capped by the batch's 320 tokens
    assert keys == [(64, 2, 64), (64, 2, 64), (128, 2, 128), (320, 2, 320), (64, 4, 64)]
    assert launch_config(64).block_m == 16


def test_a_batch_longer_than_the_positions_is_refused():
    attn = TritonVarlenAttention(AttentionSpec(4, 4, 32, False), 256)
    with pytest.raises(ValueError, match="longer than the model's 256 positions"):
        attn.graph_key(pack([[1] * 300], BucketPolicy()))


def test_random_layouts_of_one_graph_key_match_exact_attention():
    """What a replayed graph does: one grid (the key's max_q and slots) for layouts of other lengths."""
    spec = AttentionSpec(2, 1, 64, True)
    rng = np.random.default_rng(5)
    for _ in range(4):
        lengths = rng.integers(1, 60, size=int(rng.integers(1, 6))).tolist()
        batch = pack([[1] * n for n in lengths], BucketPolicy(seq_buckets=(8,)))
        q, k, v = _qkv(spec, batch.key[0], torch.Generator().manual_seed(int(rng.integers(1 << 30))))
        got = varlen_attention(q, k, v, batch.cu_seqlens.to(DEVICE), 512, True, spec.scale)
        want = _exact(spec, q, k, v, batch.cu_seqlens)
        torch.testing.assert_close(got.float().cpu(), want.cpu(), atol=TOL, rtol=TOL)


ROTARY_SHAPES = [AttentionSpec(4, 2, 64, True), AttentionSpec(2, 2, 128, False), AttentionSpec(2, 1, 32, True),
                 AttentionSpec(4, 1, 128, True)]  # the last: two sets of stacked heads a group


@pytest.mark.parametrize("spec", ROTARY_SHAPES, ids=str)
@pytest.mark.parametrize("lengths", [[1], [37], [128], [5, 70, 1, 33]])
def test_the_folded_qk_norm_and_rope_equal_the_separate_kernel(spec, lengths):
    """Qwen3's q/k RMSNorm and RoPE applied as the kernel loads q and k (each row at its place in its sequence) give
    what ops.qk_norm_rope then the kernel give, and exact attention of the normed, rotated q and k computed in float32
    from the same inputs; the projection's q and k are left as they were."""
    from embedpipe.kernels.attention import QKNormRope
    from embedpipe.kernels.cuda.triton_ops import TritonOps
    from embedpipe.kernels.models.layers import RotaryEmbedding
    from embedpipe.kernels.ops import TorchOps

    heads, kv_heads, dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
    batch = pack([[1] * n for n in lengths], BucketPolicy())
    num_tokens, cu = batch.key[0], batch.cu_seqlens.to(DEVICE)
    g = torch.Generator().manual_seed(len(lengths) * 1000 + dim)
    qkv = torch.randn(num_tokens, (heads + 2 * kv_heads) * dim, generator=g)
    qkv[:, :(heads + kv_heads) * dim] *= 3  # q and k far from unit RMS: the norm matters; v as the other tests'
    qkv = qkv.to(DEVICE, DTYPE)
    # weights about 1 (0.5-1.5): scores spread as in the other tests, for which TOL is set
    qw, kw = ((0.5 + torch.rand(dim, generator=g)).to(DEVICE, DTYPE) for _ in range(2))
    rotary = RotaryEmbedding(dim, 256, 10_000.0).to(DEVICE)
    fold = QKNormRope(qw, kw, 1e-6, rotary.cos, rotary.sin)
    positions, _ = TorchOps.token_layout(cu, num_tokens)
    max_q = max(64, 1 << (max(lengths + [num_tokens - sum(lengths)]) - 1).bit_length())

    def separate(ops, dtype=DTYPE):
        return ops.qk_norm_rope(qkv.to(dtype, copy=True), qw.to(dtype), kw.to(dtype), positions, rotary.cos,
                                rotary.sin, heads, kv_heads, dim, 1e-6)  # TritonOps works in place: a copy

    q, k, v = qkv.clone().split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
    q, k, v = (t.view(num_tokens, -1, dim) for t in (q, k, v))
    before = qkv.clone()
    got = varlen_attention(q, k, v, cu, max_q, spec.causal, spec.scale, qk_norm_rope=fold)
    # a group's query heads stacked in one block, each key block normed and rotated once for them
    stacked = varlen_attention(q, k, v, cu, max_q, spec.causal, spec.scale, LaunchConfig(16, 64, 4, 1, heads=2),
                               qk_norm_rope=fold)
    assert torch.equal(torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], 1), before)
    unfolded = varlen_attention(*separate(TritonOps), cu, max_q, spec.causal, spec.scale)
    tight = 1e-5 if DTYPE == torch.float32 else 1e-2  # the same normed, rotated q and k; its dots in two halves
    torch.testing.assert_close(got, unfolded, atol=tight, rtol=tight)
    torch.testing.assert_close(stacked, unfolded, atol=tight, rtol=tight)
    want = _exact(spec, *separate(TorchOps, torch.float32), batch.cu_seqlens)  # float32 from the same inputs
    torch.testing.assert_close(got.float().cpu(), want.cpu(), atol=TOL, rtol=TOL)


def test_the_backend_folds_the_qk_norm_and_rope_up_to_its_bound():
    """Up to FOLD_MAX_Q rows a sequence the planned batch takes the fold; past it the model runs ops.qk_norm_rope
    first (each key block would be normed again by too many query blocks)."""
    from embedpipe.kernels.cuda.attention import FOLD_MAX_Q

    attn = TritonVarlenAttention(AttentionSpec(4, 2, 64, True), 4096)
    folds = {}
    for length in (16, FOLD_MAX_Q, FOLD_MAX_Q + 1, 1000):
        batch = pack([[1] * length], BucketPolicy())
        attn.plan(batch.cu_seqlens, batch.num_seqs, attn.graph_key(batch), batch.cu_seqlens.to(DEVICE))
        folds[length] = attn.folds_qk_norm_rope
    assert folds == {16: True, FOLD_MAX_Q: True, FOLD_MAX_Q + 1: False, 1000: False}
