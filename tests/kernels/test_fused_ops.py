"""The fused Triton ops against the PyTorch reference ops, on random inputs.

Runs on a GPU, and on the CPU through Triton's interpreter (TRITON_INTERPRET=1) when Triton is
installed; skipped otherwise.
"""
import math
import os

import pytest
import torch
import torch.nn.functional as F

from embedpipe.kernels.activations import ACTIVATIONS
from embedpipe.kernels.ops import TorchOps

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton's interpreter is off (set TRITON_INTERPRET=1 before Python starts)", allow_module_level=True)

from embedpipe.kernels.cuda import triton_linear  # noqa: E402
from embedpipe.kernels.cuda.triton_ops import TritonOps  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16] if DEVICE == "cuda" else [torch.float32]
HALF_DTYPES = [torch.bfloat16, torch.float16] if DEVICE == "cuda" else [torch.float16]  # numpy has no bfloat16
# token counts: one row tile, a partial one; on a GPU also the large tiles (tile_config above 256 tokens)
LINEAR_TOKENS = [64, 100, 1000] if DEVICE == "cuda" else [64, 100]


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


def _linear_inputs(tokens, n, k, dtype, bias=True):
    x = torch.randn(tokens, k, device=DEVICE, dtype=dtype)
    w = (torch.randn(n, k, device=DEVICE) / k ** 0.5).to(dtype)
    return x, w, (torch.randn(n, device=DEVICE) * 0.5).to(dtype) if bias else None


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("act", ["gelu", "gelu_pytorch_tanh", "relu", "identity"])
@pytest.mark.parametrize("tokens", LINEAR_TOKENS)
@pytest.mark.parametrize("bias", [True, False])
def test_linear_act_fused(dtype, act, tokens, bias):
    """The matmul with its activation in the epilogue equals the matmul then the activation (N = 200: a partial
    column tile)."""
    x, w, b = _linear_inputs(tokens, 200, 128, dtype, bias)
    assert triton_linear.fused_fits(x, w, act)
    _close(triton_linear.linear_act(x, w, b, act), TorchOps.linear_act(x, w, b, act), dtype)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("tokens", LINEAR_TOKENS)
def test_linear_silu_mul_fused(dtype, tokens):
    """Gate and up tiles of the same columns in one program: silu(x @ gate.T) * (x @ up.T)."""
    x, w, _ = _linear_inputs(tokens, 2 * 200, 128, dtype)
    assert triton_linear.fused_fits(x, w, "silu_mul")
    got = triton_linear.linear_silu_mul(x, w)
    assert got.shape == (tokens, 200)
    _close(got, TorchOps.linear_silu_mul(x, w), dtype)


def _close_in_ulps_and_mostly_equal(got, want, h, ulps: int, keep=None):
    """Element by element where `keep`: at most `ulps` units in the last place apart, and >= 99% bit-equal (the
    GPU's erf and exp and torch's may round differently now and then). By default on the CPU only where |h| <= 3
    (h: the activation's input): in the tail numpy's erf, which the interpreter runs, and torch's CPU erf differ by
    a few units."""
    if keep is None:
        keep = h.abs() <= 3 if DEVICE == "cpu" else torch.ones_like(h, dtype=torch.bool)
    info = torch.finfo(want.dtype)
    got, want, h = got.float()[keep], want.float()[keep], h.float()[keep]
    apart = (got - want).abs() / (info.eps * want.abs().clamp_min(info.tiny))  # in units of the last place
    worst = apart.argmax()
    assert (apart <= ulps).all(), (f"{(apart > ulps).sum().item()} elements more than {ulps} ulps apart; worst "
                                   f"{apart[worst].item():.1f} at h={h[worst].item()}: {got[worst].item()} vs "
                                   f"{want[worst].item()}; |h| of those: {h[apart > ulps].abs().min().item()} on")
    assert (got == want).float().mean() >= 0.99


def _erf_gelu_float64(h):
    """0.5 h (1 + erf(h / sqrt 2)) as 0.5 h erfc(-h / sqrt 2): no cancellation in the tail."""
    return 0.5 * h * torch.special.erfc(-h * 0.5 ** 0.5)


def _tanh_gelu_float64(h):
    """0.5 h (1 + tanh(u)) as h / (1 + exp(-2u)): 1 + tanh(u) is 0 in float64 too below h = -7."""
    return h / (1 + torch.exp(-2 * (2 / math.pi) ** 0.5 * (h + 0.044715 * h ** 3)))


_FLOAT64_FORMS = {"gelu": _erf_gelu_float64, "gelu_pytorch_tanh": _tanh_gelu_float64}


def _epilogue_inputs(dtype):
    """x [100, 128] in [-6, 6), an identity weight (the matmul exact: the epilogue alone is seen), a bias [128]."""
    x = (torch.rand(100, 128, device=DEVICE) * 12 - 6).to(dtype)
    return x, torch.eye(128, device=DEVICE, dtype=dtype), (torch.randn(128, device=DEVICE) * 0.5).to(dtype)


@pytest.mark.parametrize("act", ["gelu", "gelu_pytorch_tanh", "relu", "identity"])
def test_linear_act_epilogue_rounds_where_the_reference_does(act):
    """An identity weight makes the matmul exact, so the epilogue alone is compared with the activation's float64
    value on x + bias rounded to the dtype, rounded once (a tanh GELU for "gelu", a bias added after rounding, no
    rounding before the activation each fail it; the random-weight tests above cannot tell them apart). Below
    h = -3 the erf form's 1 + erf(h / sqrt 2) cancels in float32: there it is within erf's 2 float32 units (CUDA's
    bound for erff) times 0.5 |h|, plus a unit (H200, call 4 of results/2026-12-05-h200-fused-activation: 1.2e-7
    at most, torch's own float32 GELU 4.8e-7); the tanh form, h / (1 + exp(-2u)), does not cancel."""
    dtype = HALF_DTYPES[0]
    x, eye, b = _epilogue_inputs(dtype)
    got = triton_linear.linear_act(x, eye, b, act)
    h = (x.float() + b.float()).to(dtype).float()
    want = _FLOAT64_FORMS.get(act, ACTIVATIONS[act])(h.double()).to(dtype)
    tail = h < -3 if act == "gelu" else torch.zeros_like(h, dtype=torch.bool)
    _close_in_ulps_and_mostly_equal(got, want, h, ulps=1, keep=~tail)
    unit = torch.finfo(dtype).eps * want.float().abs()
    assert ((got.float() - want.float()).abs() <= unit + 0.5 * h.abs() * 2 * 2 ** -24)[tail].all()


def test_linear_silu_mul_epilogue_rounds_where_the_reference_does():
    """gate = x and up = x / 2 exactly: silu(gate) rounded, times up rounded, one rounding."""
    dtype = HALF_DTYPES[0]
    x = (torch.rand(100, 128, device=DEVICE) * 10 - 5).to(dtype)
    w = torch.cat([torch.eye(128, device=DEVICE), 0.5 * torch.eye(128, device=DEVICE)]).to(dtype)
    want = (F.silu(x.float()).to(dtype).float() * (0.5 * x.float()).to(dtype).float()).to(dtype)
    # a silu rounded one unit apart (exp's rounding) moves the product by up to two
    _close_in_ulps_and_mostly_equal(triton_linear.linear_silu_mul(x, w), want, x.float(), ulps=2)


def test_linear_act_large_tiles():
    """The tiles tile_config picks above 256 tokens, on the CPU too (a partial row and column tile)."""
    x, w, b = _linear_inputs(300, 200, 128, HALF_DTYPES[0])
    for gated, config in ((False, triton_linear.tile_config(300, gated=False)),
                          (True, triton_linear.tile_config(300, gated=True))):
        if gated:
            wg = torch.cat([w, w.flip(0)])
            _close(triton_linear.linear_silu_mul(x, wg, config), TorchOps.linear_silu_mul(x, wg), x.dtype)
        else:
            _close(triton_linear.linear_act(x, w, b, "gelu", config), TorchOps.linear_act(x, w, b, "gelu"), x.dtype)


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("act", ["gelu", "identity", "silu_mul"])
def test_linear_act_partial_tiles(act, persistent):
    """Tiles moved by tensor descriptors, one per program or persistent: rows and columns past the ends (100 x 200
    against 64 x 64 tiles) load as zeros and are not stored; the gated form reads its up tile at the right rows."""
    dtype = HALF_DTYPES[0]
    x, w, b = _linear_inputs(100, 200, 128, dtype)
    config = triton_linear.TileConfig(64, 64, 64, 8, 4, 3, persistent=persistent)  # persistent: 4 programs
    # on the CPU, for 2 x 4 tiles: each loops
    if act == "silu_mul":
        wg = torch.cat([w, w.flip(0)])
        got, want = triton_linear.linear_silu_mul(x, wg, config), TorchOps.linear_silu_mul(x, wg)
    else:
        got, want = triton_linear.linear_act(x, w, b, act, config), TorchOps.linear_act(x, w, b, act)
    assert got.shape == want.shape
    _close(got, want, dtype)


def test_the_kernel_is_taken_within_its_epilogues_token_range(monkeypatch):
    x, w, b = _linear_inputs(64, 96, 128, torch.float16)
    for act, kind in (("gelu", "activation"), ("relu", "activation"), ("identity", "identity")):
        for tokens, taken in (((65, 100), False), ((64, 64), True), ((1, 63), False), (None, False)):  # None: never
            monkeypatch.setitem(triton_linear.TOKEN_RANGES, kind, tokens)
            assert triton_linear.fused_fits(x, w, act, b) and triton_linear.fused_takes(x, w, act, b) == taken
    monkeypatch.setitem(triton_linear.TOKEN_RANGES, "identity", None)  # the others' ranges do not leak into it
    monkeypatch.setitem(triton_linear.TOKEN_RANGES, "activation", (1, 1000))
    assert not triton_linear.fused_takes(x, w, "identity", b) and triton_linear.fused_takes(x, w, "gelu", b)
    wg = torch.cat([w, w])
    for tokens, taken in (((1, 64), True), (None, False)):
        monkeypatch.setitem(triton_linear.TOKEN_RANGES, "silu_mul", tokens)
        assert triton_linear.fused_takes(x, wg, "silu_mul") == taken


def test_a_plain_projection_takes_the_kernel_up_to_its_weight_bound(monkeypatch):
    """IDENTITY_MAX_WEIGHT bounds the plain form's weight (N x K elements); the activation forms have no bound."""
    x, w, b = _linear_inputs(64, 96, 128, torch.float16)  # a 128 x 96 weight: 12,288 elements
    monkeypatch.setitem(triton_linear.TOKEN_RANGES, "identity", (1, 256))
    monkeypatch.setitem(triton_linear.TOKEN_RANGES, "activation", (1, 256))
    for bound, taken in ((12_288, True), (12_287, False)):
        monkeypatch.setattr(triton_linear, "IDENTITY_MAX_WEIGHT", bound)
        assert triton_linear.fused_takes(x, w, "identity", b) == taken
        assert triton_linear.fused_takes(x, w, "gelu", b)
    # as set: BERT-base's and MiniLM's QKV take it at 16 and 128 tokens, Qwen3-0.6B's does not; nor past 256 tokens
    monkeypatch.undo()
    for (n, k), taken in (((2304, 768), True), ((1152, 384), True), ((4096, 1024), False)):
        w = torch.empty(n, k, dtype=torch.float16)
        for tokens in (16, 128, 257):
            x = torch.empty(tokens, k, dtype=torch.float16)
            assert triton_linear.fused_takes(x, w, "identity") == (taken and tokens <= 256)


def test_triton_ops_linear_runs_the_kernel_within_its_range(monkeypatch):
    """ops.linear (the plain projections): the kernel with no activation inside TOKEN_RANGES["identity"], cuBLAS's
    F.linear outside it; the same result either way."""
    x, w, b = _linear_inputs(64, 96, 128, HALF_DTYPES[0])
    calls = []
    kernel = triton_linear.linear_act
    monkeypatch.setattr(triton_linear, "linear_act", lambda *args: calls.append(args[3]) or kernel(*args))
    for tokens, ran in (((1, 64), ["identity"]), ((65, 2048), []), (None, [])):
        calls.clear()
        monkeypatch.setitem(triton_linear.TOKEN_RANGES, "identity", tokens)
        got = TritonOps.linear(x, w, b)
        assert calls == ran
        _close(got, TorchOps.linear(x, w, b), x.dtype)


@pytest.mark.parametrize("act", ["gelu_pytorch_tanh", "gelu"])
def test_triton_ops_linear_act_outside_the_kernels_range(monkeypatch, act):
    """Outside TOKEN_RANGES a GELU runs in cuBLASLt's epilogue (CUDA: its tanh form, for the erf "gelu" too; the CPU's
    addmm runs torch's GELU): within the dtype's rounding of the reference."""
    monkeypatch.setitem(triton_linear.TOKEN_RANGES, "activation", None)
    x, w, b = _linear_inputs(64, 96, 128, HALF_DTYPES[0])
    _close(TritonOps.linear_act(x, w, b, act), TorchOps.linear_act(x, w, b, act), x.dtype)


@pytest.mark.skipif(DEVICE == "cpu", reason="cuBLASLt's epilogue: CUDA only")
def test_erf_gelu_in_cublaslts_epilogue_is_its_tanh_form():
    """BERT's erf "gelu" runs in half precision as cuBLASLt's tanh GELU (CUBLASLT_GELU). Through an identity weight
    (h = x + bias, added in float32): the tanh form rounded once, give or take 0.5 |h| times a 2^-11 relative error
    of its tanh (a hardware tanh.approx's size: call 4 of results/2026-12-05-h200-fused-activation measured 1.7
    units at h = -3.5 and 5e-7 in the tail on the H200); so within the approximation's 4.8e-4 (at |h| = 2.7) more
    of the erf form. Where the forms part by several units (h in [-4, -2]) it rounds to the tanh form's value, not
    the erf form's (call 4: 78% and 3% of the elements)."""
    assert triton_linear.TOKEN_RANGES["activation"] is None and "gelu" in triton_linear.CUBLASLT_GELU
    dtype = HALF_DTYPES[0]
    x, eye, b = _epilogue_inputs(dtype)
    got = TritonOps.linear_act(x, eye, b, "gelu").float()
    h = x.float() + b.float()
    tanh_form, erf_form = _tanh_gelu_float64(h.double()), _erf_gelu_float64(h.double())
    unit = torch.finfo(dtype).eps * got.abs()
    tanh_error = 0.5 * h.abs() * 2 ** -11
    assert ((got - tanh_form).abs() <= unit + tanh_error).all()
    assert ((got - erf_form).abs() <= 4.8e-4 + unit + tanh_error).all()
    apart = (h >= -4) & (h <= -2)
    assert (got == tanh_form.to(dtype).float())[apart].float().mean() >= 0.5
    assert (got == erf_form.to(dtype).float())[apart].float().mean() <= 0.1


def test_fused_fits_needs_tma_alignment_and_a_gpu_with_tma(monkeypatch):
    """TMA descriptors need 16-byte aligned bases and rows (x's, the weight's, the output's) and a Hopper GPU."""
    x, w, b = _linear_inputs(64, 96, 128, torch.float16)
    assert triton_linear.fused_fits(x, w, "gelu", b)
    shifted = x.view(-1)[1:1 + x.numel() - 128].view(63, 128)  # a base 2 bytes past 16-byte alignment
    assert not triton_linear.fused_fits(shifted, w, "gelu", b)
    assert not triton_linear.fused_fits(x, w[:92], "gelu", b[:92])  # 92 output columns: rows of 184 bytes
    assert not triton_linear.fused_fits(x, torch.cat([w[:44], w[:44]]), "silu_mul")  # 44 columns: 88 bytes
    monkeypatch.setattr(triton_linear, "has_tma", lambda device: False)
    assert not triton_linear.fused_fits(x, w, "gelu", b)


def test_linear_act_falls_back_where_the_fused_kernel_does_not_fit():
    """float32 (tl.dot would run tf32), K not a multiple of 64, an activation the epilogue lacks: TorchOps' result."""
    x, w, b = _linear_inputs(64, 96, 128, torch.float16)
    for x, w, b, act in [(*_linear_inputs(64, 96, 128, torch.float32), "gelu"),
                         (*_linear_inputs(64, 96, 100, torch.float16), "gelu"),
                         (x, w, b, "silu"),
                         (x, w.float(), b, "gelu"),  # the weight's dtype differs
                         (x, w[:, :64], b, "gelu"),  # K differs
                         (x, w, b[:48], "gelu")]:  # a bias of another width
        assert not triton_linear.fused_fits(x, w, act, b) and not triton_linear.fused_takes(x, w, act, b)
    for x, w, b, act in [(*_linear_inputs(64, 96, 128, torch.float32), "gelu"),
                         (*_linear_inputs(64, 96, 100, torch.float32), "silu")]:
        assert torch.equal(TritonOps.linear_act(x, w, b, act), TorchOps.linear_act(x, w, b, act))


def test_fused_fits_needs_k_a_multiple_of_the_picked_block_k():
    """K = 192: a multiple of the 64-wide K tiles above 256 tokens, not of the 128-wide ones below (tile_config);
    where it does not fit, TritonOps runs cuBLAS (the kernel would refuse it)."""
    for tokens, fits in ((64, False), (300, True)):
        x, w, _ = _linear_inputs(tokens, 2 * 96, 192, HALF_DTYPES[0])
        assert triton_linear.tile_config(tokens, gated=True).block_k == (128 if tokens <= 256 else 64)
        assert triton_linear.fused_fits(x, w, "silu_mul") == fits
        _close(TritonOps.linear_silu_mul(x, w), TorchOps.linear_silu_mul(x, w), x.dtype)


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
