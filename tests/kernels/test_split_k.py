"""The split-K projections (kernels/cuda/triton_split_k.py) and the norm kernels that add up their partial sums,
against the PyTorch reference ops.

Runs on a GPU, and on the CPU through Triton's interpreter (TRITON_INTERPRET=1) when Triton is installed; skipped
otherwise.
"""
import os

import pytest
import torch

from embedpipe.kernels.ops import TorchOps

pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton's interpreter is off (set TRITON_INTERPRET=1 before Python starts)", allow_module_level=True)

from embedpipe.kernels.cuda import triton_split_k  # noqa: E402
from embedpipe.kernels.cuda.triton_ops import TritonOps  # noqa: E402
from embedpipe.kernels.cuda.triton_split_k import SplitConfig, split_config  # noqa: E402

HALF = torch.bfloat16 if DEVICE == "cuda" else torch.float16  # numpy (the interpreter) has no bfloat16


def _inputs(tokens, n, k, bias=True):
    x = torch.randn(tokens, k, device=DEVICE).to(HALF)
    w = (torch.randn(n, k, device=DEVICE) / k ** 0.5).to(HALF)
    return x, w, (torch.randn(n, device=DEVICE) * 0.5).to(HALF) if bias else None


def _close(got, want):
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("tokens,n,k,config", [
    (100, 96, 384, SplitConfig(64, 64, 64, 3)),  # partial row and column tiles, 2 K steps a split
    (64, 128, 320, SplitConfig(64, 64, 64, 2)),  # 5 K steps: the second split holds 2 of them
    (64, 128, 128, SplitConfig(64, 32, 128, 1)),  # no split
    (128, 96, 768, SplitConfig(64, 32, 128, 2, num_stages=5)),  # split_config's wide-K tiles and 5 stages: 3 steps
    # of 128 a split
    (100, 96, 1024, SplitConfig(128, 32, 128, 4)),  # 128-row tiles (split_config's at 65-128 tokens), given: a
    # partial row tile, 2 steps a split
    (64, 64, 256, SplitConfig(64, 64, 64, 8)),  # more splits asked than K steps: one step each, none empty
])
def test_partials_add_up_to_the_matmul(tokens, n, k, config):
    x, w, _ = _inputs(tokens, n, k, bias=False)
    parts = triton_split_k.partials(x, w, config)
    steps = k // config.block_k
    assert parts.dtype == torch.float32 and parts.shape == (min(config.splits, steps), tokens, n)
    assert (parts != 0).flatten(1).any(1).all()  # every plane holds a K range's products
    want = x.double() @ w.double().T
    torch.testing.assert_close(parts.double().sum(0), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("tokens,n,k", [(64, 768, 768), (128, 768, 3072), (128, 1024, 2048), (512, 384, 1536),
                                        (16, 1024, 3072)])
def test_split_config_fills_the_sms_with_no_empty_split(tokens, n, k):
    sms = 132
    config = split_config(tokens, n, k, sms)
    tiles = -(-tokens // config.block_m) * -(-n // config.block_n)
    steps = k // config.block_k
    per_split = -(-steps // config.splits)
    assert 1 <= config.splits <= triton_split_k.MAX_SPLITS
    assert (config.splits - 1) * per_split < steps  # the last split holds at least one step
    assert config.splits == 1 or (tiles * config.splits <= sms and per_split >= 2)


def test_split_config_splits_a_batch_of_one():
    """BERT-base's attention output at 1 x 128 tokens: 48 output tiles of 64 x 32 on 132 SMs, split 2 ways (3 steps of
    128 each). Where those tiles would not split K, 64 x 64 x 64 ones do: MiniLM-L6's attention output (K = 384, three
    steps of 128; 12 tiles split 3 ways) and BERT-base's FFN output at 256 tokens (96 tiles of 64 x 32: one wave).
    64-row tiles pipeline 5 stages deep, 128-row ones 4 (SplitConfig.num_stages)."""
    assert split_config(128, 768, 768, 132) == SplitConfig(64, 32, 128, 2, num_stages=5)
    assert split_config(128, 384, 384, 132) == SplitConfig(64, 64, 64, 3, num_stages=5)
    assert split_config(256, 768, 3072, 132) == SplitConfig(64, 64, 64, 2, num_stages=5)
    assert split_config(4096, 768, 3072, 132).splits == 1  # 768 tiles: a full wave already


def test_split_config_takes_128_row_tiles_where_the_split_makes_up_for_them():
    """At 65-128 tokens: Qwen3-0.6B's o and down (32 tiles of 128 rows split 4 ways, as many programs as 64 tiles of
    64 rows split 2 ways) and BERT-base's FFN output (24 tiles split 5 ways: 120 programs against 96) take 128-row
    tiles; BERT-base's attention output (24 tiles split 3 ways: 72 against 96) and MiniLM-L6's FFN output (12 split 6
    ways: 72 against 96) keep 64 rows; so does every projection at 64 tokens or fewer."""
    assert split_config(128, 1024, 2048, 132) == SplitConfig(128, 32, 128, 4)
    assert split_config(128, 1024, 3072, 132) == SplitConfig(128, 32, 128, 4)
    assert split_config(128, 768, 3072, 132) == SplitConfig(128, 32, 128, 5)
    assert split_config(128, 768, 768, 132) == SplitConfig(64, 32, 128, 2, num_stages=5)
    assert split_config(128, 384, 1536, 132) == SplitConfig(64, 32, 128, 4, num_stages=5)
    assert split_config(64, 1024, 2048, 132) == SplitConfig(64, 32, 128, 4, num_stages=5)
    assert split_config(16, 768, 3072, 132) == SplitConfig(64, 32, 128, 5, num_stages=5)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_add_layer_norm_from_partials(monkeypatch, bias):
    """LayerNorm(x @ w.T + b + residual) through the partial sums: as the reference composes it."""
    _take_every_call(monkeypatch)
    x, w, b = _inputs(100, 192, 256, bias)
    r = torch.randn(100, 192, device=DEVICE).to(HALF)
    lw, lb = (torch.randn(192, device=DEVICE).to(HALF) for _ in range(2))
    calls = []
    monkeypatch.setattr(triton_split_k, "partials", _spy(triton_split_k.partials, calls))
    got = TritonOps.linear_add_layer_norm(x, w, b, r, lw, lb, 1e-12)
    assert len(calls) == 1 and got.dtype == HALF and got.shape == (100, 192)
    _close(got, TorchOps.linear_add_layer_norm(x.float(), w.float(), None if b is None else b.float(), r.float(),
                                               lw.float(), lb.float(), 1e-12))
    _close(got, TorchOps.linear_add_layer_norm(x, w, b, r, lw, lb, 1e-12))


@pytest.mark.parametrize("with_residual", [True, False])
def test_linear_add_rms_norm_from_partials(monkeypatch, with_residual):
    """(RMSNorm(s), s), s = x @ w.T + residual, through the partial sums: as the reference composes it."""
    _take_every_call(monkeypatch)
    x, w, _ = _inputs(64, 256, 512, bias=False)
    r = torch.randn(64, 256, device=DEVICE).to(HALF) if with_residual else None
    nw = torch.randn(256, device=DEVICE).to(HALF)
    calls = []
    monkeypatch.setattr(triton_split_k, "partials", _spy(triton_split_k.partials, calls))
    normed, total = TritonOps.linear_add_rms_norm(x, w, None, r, nw, 1e-6)
    assert len(calls) == 1
    want_normed, want_total = TorchOps.linear_add_rms_norm(x, w, None, r, nw, 1e-6)
    _close(total, want_total)
    _close(normed, want_normed)


def test_the_partials_round_where_the_matmul_does(monkeypatch):
    """The sum of the partials plus the bias is rounded to the dtype before the residual is added, as the matmul's
    output is: with an identity weight the matmul is exact, and the result equals the reference's to the bit."""
    _take_every_call(monkeypatch)
    x = torch.randn(64, 128, device=DEVICE).to(HALF)
    w = torch.eye(128, device=DEVICE, dtype=HALF)
    b = (torch.randn(128, device=DEVICE) * 3).to(HALF)
    r = torch.randn(64, 128, device=DEVICE).to(HALF)
    nw = torch.ones(128, device=DEVICE, dtype=HALF)
    got, want = TritonOps.linear_add_rms_norm(x, w, b, r, nw, 1e-6), TorchOps.linear_add_rms_norm(x, w, b, r, nw, 1e-6)
    assert torch.equal(got[1], want[1])


@pytest.mark.parametrize("token_range", [None, (200, 300)])
def test_outside_its_token_range_the_projection_runs_then_the_norm(monkeypatch, token_range):
    monkeypatch.setattr(triton_split_k, "TOKEN_RANGE", token_range)
    calls = []
    monkeypatch.setattr(triton_split_k, "partials", _spy(triton_split_k.partials, calls))
    x, w, b = _inputs(64, 128, 128)
    r = torch.randn(64, 128, device=DEVICE).to(HALF)
    lw, lb = (torch.randn(128, device=DEVICE).to(HALF) for _ in range(2))
    got = TritonOps.linear_add_layer_norm(x, w, b, r, lw, lb, 1e-12)
    assert calls == []
    _close(got, TorchOps.linear_add_layer_norm(x, w, b, r, lw, lb, 1e-12))


def test_takes_projections_of_any_width_in_its_token_range(monkeypatch):
    """Qwen3-0.6B's 1,024-output o_proj and down_proj too (with PDL they gained, H100 2026-12-06)."""
    monkeypatch.setattr(triton_split_k, "TOKEN_RANGE", (1, 64))
    for n in (128, 1024):
        x, w, _ = _inputs(64, n, 128)
        assert triton_split_k.takes(x, w)
        assert not triton_split_k.takes(torch.cat([x, x]), w)  # 128 tokens: past the range


def test_fits_needs_half_precision_k_a_multiple_of_64_and_contiguous_rows():
    x, w, _ = _inputs(64, 128, 128)
    assert triton_split_k.fits(x, w)
    assert not triton_split_k.fits(x.float(), w.float())
    x96, w96, _ = _inputs(64, 128, 96)
    assert not triton_split_k.fits(x96, w96)
    assert not triton_split_k.fits(x.t().contiguous().t(), w)  # columns contiguous, not rows
    assert not triton_split_k.fits(x[:0], w)


def _take_every_call(monkeypatch):
    monkeypatch.setattr(triton_split_k, "TOKEN_RANGE", (1, 1 << 20))


def _spy(fn, calls):
    def spy(*args, **kwargs):
        calls.append(args)
        return fn(*args, **kwargs)
    return spy
