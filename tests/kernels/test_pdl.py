"""Programmatic dependent launch (kernels/cuda/pdl.py): the launch options, and on a GPU that the engine's outputs and a
long captured chain of dependent kernels are bit-for-bit the same with and without it.

The GPU tests are marked `gpu`: skipped without a CUDA device; run on the H200 (see benchmarks/gpu_setup.sh).
"""
import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from embedpipe.kernels.batch import BucketPolicy, pack  # noqa: E402
from embedpipe.kernels.cuda import pdl  # noqa: E402
from embedpipe.kernels.engine import Engine, EngineConfig  # noqa: E402
from embedpipe.kernels.graph_cache import GraphConfig  # noqa: E402
from embedpipe.kernels.testing.random_model import write_random_model  # noqa: E402

CUDA = torch.cuda.is_available()


def test_cpu_launches_without_pdl():
    launch = pdl.options(torch.empty(16, 8))
    assert launch == {"PDL": False}  # no launch_pdl keyword for the interpreter
    assert pdl.prefetch_lines(3072, launch) == 1  # nothing prefetched: one compiled variant


@pytest.mark.parametrize("cols,lines", [(1, 1), (64, 1), (65, 2), (640, 16), (768, 16), (1024, 16), (3072, 64)])
def test_prefetch_lines_cover_the_columns_in_a_power_of_two(cols, lines):
    assert pdl.prefetch_lines(cols, pdl.ON) == lines  # 64 half-precision units a 128-byte line


def _pdl_kernels():
    """Every Triton kernel of the forward pass that takes the PDL constexpr: (name, source). A kernel is a JITFunction,
    or with Triton's interpreter on an InterpretedFunction; both keep the Python function as .fn."""
    import inspect

    from embedpipe.kernels.cuda import triton_attention, triton_linear, triton_ops, triton_split_k
    return [(f"{module.__name__}.{name}", inspect.getsource(fn.fn))
            for module in (triton_ops, triton_linear, triton_split_k, triton_attention)
            for name, fn in vars(module).items() if "PDL" in getattr(fn, "arg_names", ())]


# what a kernel may not do before pdl.wait: load or store an activation, directly or through a helper that does
MEMORY_BEFORE_WAIT = ("tl.load(", "tl.store(", ".load(", ".store(", "tl.dot(", "_projection_row(", "_output_tile(",
                      "_attend(", "_store_layer_norm(")


def test_every_pdl_kernel_waits_before_it_touches_an_activation():
    """pdl.py's rule, read off each kernel's source: pdl.wait(PDL) comes before any load, store or helper that loads
    (weights may be prefetched before it: pdl.prefetch_*). A kernel that broke it could read what the kernel before
    has not written yet."""
    kernels = _pdl_kernels()
    assert len(kernels) == 12  # the norms, RoPE, SiLU-and-mul, pooling, layout, the matmuls, attention
    for name, src in kernels:
        body = src[src.index("):\n"):]  # past the signature
        assert "pdl.wait(PDL)" in body, name
        before = body[:body.index("pdl.wait(PDL)")]
        assert not [op for op in MEMORY_BEFORE_WAIT if op in before.replace("pdl.prefetch", "")], name


def _pdl_off(monkeypatch):
    monkeypatch.setattr(pdl, "supported", lambda device: False)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_hopper_launches_with_pdl():
    """The GPU tests below compare something only where PDL is on: on Hopper it must be."""
    device = torch.device("cuda")
    if torch.cuda.get_device_capability(device) < (9, 0):
        pytest.skip("PDL needs compute capability 9.0")
    assert pdl.options(torch.empty(pdl.MAX_TOKENS, 8, device=device)) == {"PDL": True, "launch_pdl": True}
    assert pdl.options(torch.empty(pdl.MAX_TOKENS + 1, 8, device=device)) == {"PDL": False}  # large batches: without


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_a_captured_chain_of_dependent_kernels_is_the_same_with_pdl(monkeypatch):
    """400 kernels, each reading the output of the one before (split-K partials, then the add + LayerNorm that sums
    them, as a BERT layer's projections run at a batch of one), captured in one graph and replayed: bit-equal to the
    chain launched without PDL. A kernel that read before the one before had written would differ."""
    from embedpipe.kernels.cuda.triton_ops import TritonOps
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = [(torch.randn(768, 768, device="cuda", generator=gen) / 28).bfloat16() for _ in range(4)]
    ln_w, ln_b = torch.ones(768, device="cuda", dtype=torch.bfloat16), torch.zeros(768, device="cuda",
                                                                                   dtype=torch.bfloat16)
    x0 = torch.randn(128, 768, device="cuda", generator=gen).bfloat16()

    def chain(x):
        for i in range(200):
            x = TritonOps.linear_add_layer_norm(x, weights[i % 4], None, x, ln_w, ln_b, 1e-12)
        return x

    want = chain(x0.clone())
    graph, static_in = torch.cuda.CUDAGraph(), x0.clone()
    chain(static_in)  # compiled before capture
    with torch.cuda.graph(graph):
        static_out = chain(static_in)
    for _ in range(3):
        graph.replay()
        torch.testing.assert_close(static_out, want, atol=0, rtol=0)
    _pdl_off(monkeypatch)
    torch.testing.assert_close(chain(x0.clone()), want, atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("model", ["bert-base", "qwen3-0.6b"])
def test_engine_outputs_are_the_same_with_and_without_pdl(tmp_path, monkeypatch, model):
    """Batches of one (16 and 128 tokens: the Triton kernels launched with PDL between cuBLAS's) and of four (207),
    eager and replayed from graphs: bit-equal to the engine without PDL."""
    write_random_model(model, tmp_path)
    rng = np.random.default_rng(0)
    batches = [pack([rng.integers(1000, 30000, size=n).tolist() for n in lengths], BucketPolicy())
               for lengths in ([16], [128], [128], [40, 100, 7, 60])]

    def outputs(graphs: bool):
        engine = Engine(EngineConfig(model=str(tmp_path), device="cuda", attention="triton",
                                     graphs=GraphConfig(enabled=graphs)))
        return [engine.step(b).result() for b in batches + batches + batches]  # eager, capture, replay

    with_pdl = outputs(True), outputs(False)
    _pdl_off(monkeypatch)
    without = outputs(True), outputs(False)
    for got_runs, want_runs in zip(with_pdl, without):
        for got, want in zip(got_runs, want_runs):
            torch.testing.assert_close(got, want, atol=0, rtol=0)
