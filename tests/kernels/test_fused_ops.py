"""The fused Triton ops against the PyTorch reference ops, on random inputs.

Runs on a GPU, and on the CPU through Triton's interpreter (TRITON_INTERPRET=1) when Triton is
installed; skipped otherwise.
"""
import os

import pytest
import torch

from embedpipe.kernels.ops import TorchOps

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton's interpreter is off (set TRITON_INTERPRET=1 before Python starts)", allow_module_level=True)

from embedpipe.kernels.cuda.triton_ops import TritonOps  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16] if DEVICE == "cuda" else [torch.float32]


def _close(got, want, dtype):
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [True, False])
def test_add_layer_norm(dtype, with_residual):
    x = torch.randn(37, 384, device=DEVICE, dtype=dtype)
    r = torch.randn_like(x) if with_residual else None
    w, b = torch.randn(384, device=DEVICE, dtype=dtype), torch.randn(384, device=DEVICE, dtype=dtype)
    _close(TritonOps.add_layer_norm(x, r, w, b, 1e-12), TorchOps.add_layer_norm(x, r, w, b, 1e-12), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [True, False])
def test_add_rms_norm(dtype, with_residual):
    x = torch.randn(37, 1024, device=DEVICE, dtype=dtype)
    r = torch.randn_like(x) if with_residual else None
    w = torch.randn(1024, device=DEVICE, dtype=dtype)
    got, want = TritonOps.add_rms_norm(x, r, w, 1e-6), TorchOps.add_rms_norm(x, r, w, 1e-6)
    _close(got[0], want[0], dtype)
    _close(got[1], want[1], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope(dtype):
    heads, kv_heads, head_dim, tokens = 4, 2, 32, 29
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, device=DEVICE, dtype=dtype)
    qw, kw = (torch.randn(head_dim, device=DEVICE, dtype=dtype) for _ in range(2))
    positions = torch.randint(0, 100, (tokens,), device=DEVICE, dtype=torch.int32)
    angles = torch.outer(torch.arange(128.0), torch.rand(head_dim // 2)).repeat(1, 2).to(DEVICE)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    want = TorchOps.qk_norm_rope(qkv.clone(), qw, kw, positions, cos, sin, heads, kv_heads, head_dim, 1e-6)
    got = TritonOps.qk_norm_rope(qkv.clone(), qw, kw, positions, cos, sin, heads, kv_heads, head_dim, 1e-6)
    for g, w in zip(got, want):
        _close(g, w, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype):
    x = torch.randn(19, 2 * 3072, device=DEVICE, dtype=dtype)
    _close(TritonOps.silu_and_mul(x), TorchOps.silu_and_mul(x), dtype)


@triton.jit
def _run_time_loop(Bounds, Out):
    """Sums the integers [Bounds[p], Bounds[p + 1]): a loop with run-time bounds, as the mean pooling's."""
    p = tl.program_id(0)
    total = 0
    for i in range(tl.load(Bounds + p), tl.load(Bounds + p + 1)):
        total += i
    tl.store(Out + p, total)


def _interpreter_runs_run_time_loops() -> bool:
    """Some Triton interpreters could not run such a loop under numpy 2 (int() of a 1-element array);
    Triton 3.6 with numpy 2.4 runs it. The GPU always does."""
    out = torch.zeros(1, dtype=torch.int32)
    try:
        _run_time_loop[(1,)](torch.tensor([3, 7], dtype=torch.int32), out)
    except Exception:  # noqa: BLE001 - any failure of the interpreter's loop means: skip those tests
        return False
    return int(out) == 3 + 4 + 5 + 6


INTERPRETER_LOOP_BUG = pytest.mark.skipif(
    DEVICE == "cpu" and not _interpreter_runs_run_time_loops(),
    reason="this Triton's CPU interpreter cannot run a loop with run-time bounds under numpy 2 (int() of a "
           "1-element array); the GPU run covers mean pooling")


@pytest.mark.parametrize("mode", [pytest.param("mean", marks=INTERPRETER_LOOP_BUG), "cls", "lasttoken"])
@pytest.mark.parametrize("normalize,dim", [(True, 384), (False, 384), (True, 128)])
def test_pool(mode, normalize, dim):
    lengths = [5, 1, 40, 17, 0, 0]  # a padding sequence and empty slots at the end
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    seq_ids = torch.repeat_interleave(torch.arange(len(lengths), device=DEVICE), torch.tensor(lengths, device=DEVICE))
    hidden = torch.randn(int(cu[-1]), 384, device=DEVICE)
    got = TritonOps.pool(hidden, cu, seq_ids.int(), mode, dim, normalize)
    want = TorchOps.pool(hidden, cu, seq_ids.int(), mode, dim, normalize)
    _close(got[:4], want[:4], torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_types", [True, False])
def test_embed_layer_norm(dtype, with_types):
    tokens, hidden = 41, 384
    word, position = (torch.randn(n, hidden, device=DEVICE, dtype=dtype) for n in (1000, 512))
    token_type = torch.randn(2, hidden, device=DEVICE, dtype=dtype)
    ids = torch.randint(0, 1000, (tokens,), device=DEVICE, dtype=torch.int32)
    positions = torch.randint(0, 512, (tokens,), device=DEVICE, dtype=torch.int32)
    types = torch.randint(0, 2, (tokens,), device=DEVICE, dtype=torch.int32) if with_types else None
    w, b = torch.randn(hidden, device=DEVICE, dtype=dtype), torch.randn(hidden, device=DEVICE, dtype=dtype)
    args = (ids, positions, types, word, position, token_type, w, b, 1e-12)
    _close(TritonOps.embed_layer_norm(*args), TorchOps.embed_layer_norm(*args), dtype)


@pytest.mark.parametrize("mode", [pytest.param("mean", marks=INTERPRETER_LOOP_BUG), "cls"])
def test_pool_of_one_long_sequence(mode):
    """Pooled by many programs per slot (column blocks): a batch of one over every column of a wide row."""
    cu = torch.tensor([0, 700, 768], dtype=torch.int32, device=DEVICE)
    hidden = torch.randn(768, 1024, device=DEVICE)
    seq_ids = torch.repeat_interleave(torch.arange(2, device=DEVICE), torch.tensor([700, 68], device=DEVICE)).int()
    _close(TritonOps.pool(hidden, cu, seq_ids, mode, 1024, True), TorchOps.pool(hidden, cu, seq_ids, mode, 1024, True),
           torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [pytest.param("mean", marks=INTERPRETER_LOOP_BUG), "lasttoken"])
@pytest.mark.parametrize("normalize,dim", [(True, 512), (False, 512), (True, 128)])
def test_pool_spans(dtype, mode, normalize, dim):
    """All spans of a batch in one launch (late chunking): overlapping, of one token, one of many row tiles,
    in several column blocks, with padding rows after the last span."""
    spans = torch.tensor([[0, 5], [2, 4], [5, 6], [6, 706], [6, 7], [300, 706], [705, 706], [706, 739]],
                         dtype=torch.int32, device=DEVICE)
    hidden = torch.randn(768, 512, device=DEVICE, dtype=dtype)
    got = TritonOps.pool_spans(hidden, spans, mode, dim, normalize)
    want = TorchOps.pool_spans(hidden, spans, mode, dim, normalize)
    assert got.shape == (8, dim) and got.dtype == torch.float32
    _close(got, want, torch.float32)


@INTERPRETER_LOOP_BUG
def test_token_layout():
    lengths = [5, 1, 300, 17, 0, 0]  # a sequence longer than one program's block, then empty slots
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    got, want = TritonOps.token_layout(cu, int(cu[-1])), TorchOps.token_layout(cu, int(cu[-1]))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
