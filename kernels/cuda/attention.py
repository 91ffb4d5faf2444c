"""Ragged attention on CUDA: FlashInfer's ragged prefill (no KV cache), PyTorch's flash varlen and our Triton
kernel with small query blocks (kernels/cuda/triton_attention.py).

Each takes the packed q/k/v of a batch and the batch's cu_seqlens; the padding sequence owns the
padding rows, so every row belongs to a sequence and no real row sees a padding row.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util

import torch

from embedpipe.kernels.attention import AttentionBackend, AttentionSpec, TorchRaggedAttention
from embedpipe.kernels.attention_choice import (SAFE_DEFAULT, AttentionChoice, default_choice, load_choice,
                                                shape_key, single_choice)
from embedpipe.kernels.batch import longest_sequence

FLASHINFER_HEAD_DIMS = (64, 128, 256)  # head_dim 32 fails in FlashInfer's prefill kernels
MIN_WORKSPACE_BYTES = 128 << 20
# room for split-KV scratch, were a plan to split (up to ~10 bytes per output value on the H200)
SPLIT_KV_BYTES_PER_VALUE = 16
MIN_MAX_Q = 128  # the flash kernel's query block: a smaller max_q launches no fewer blocks
# the longest sequence bound (max_q) up to which the Triton kernel applies Qwen3's q/k norm and RoPE as it loads q and
# k (one kernel less a layer)
FOLD_MAX_Q = 128


class FlashInferAttention(AttentionBackend):
    """FlashInfer's ragged prefill (fa2 or fa3, NHD), run eagerly or inside the whole-model CUDA graphs.

    A replayed graph launches its kernels with the pointers and plan scalars of its capture. So each
    graph key gets a wrapper of its own in FlashInfer's CUDA-graph mode, with fixed indptr buffers of
    the key's sequence slots. Its first plan has the key's token count (every batch of a key has that
    many rows: the padding sequence owns the padding rows), which fixes the tile size and the work
    arrays' offsets for every later plan; plan() runs on the host before each replay and rewrites only
    the wrapper's buffers. Split-KV stays on there: without it graph mode builds no mask for the padded
    CTAs (flashinfer #4002). The illegal memory access seen before (benchmarks/results/2026-11-29-h200)
    came from capturing a wrapper outside that mode: each plan() put the indptr in new tensors, and the
    replay read freed ones. Eager batches use one plain wrapper without KV split (faster eagerly:
    BERT-base 1 x 128, 0.525 -> 0.445 ms).

    plan() writes a pinned host buffer that an async copy reads: before a wrapper is planned again, the
    copy of its previous plan must have run (an event per wrapper). A wrapper is planned again only when the
    layout changed since its last plan. cu_seqlens should be pinned too (the runner passes its staging
    buffer), so the indptr copy is asynchronous.
    """

    def __init__(self, spec: AttentionSpec, device: torch.device, dtype: torch.dtype, backend: str = "fa2",
                 max_tokens: int = 16384):
        import flashinfer

        super().__init__(spec)
        if spec.head_dim not in FLASHINFER_HEAD_DIMS:
            raise ValueError(f"FlashInfer prefill supports head_dim {FLASHINFER_HEAD_DIMS}, not {spec.head_dim}")
        self.device, self.dtype, self.backend = device, dtype, backend
        self._new_wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper
        scratch = SPLIT_KV_BYTES_PER_VALUE * max_tokens * spec.num_heads * spec.head_dim
        # one float workspace for every wrapper: their kernels run one after another on the engine's stream
        self.workspace = torch.empty(max(MIN_WORKSPACE_BYTES, scratch), dtype=torch.uint8, device=device)
        self._eager = _Planned(self._new_wrapper(self.workspace, "NHD", backend=backend))
        self._graphed: dict[tuple, _Planned] = {}  # graph key -> its CUDA-graph mode wrapper
        self._current = self._eager.wrapper

    def plan(self, cu_seqlens: torch.Tensor, num_seqs: int, graph_key=None, device_cu_seqlens=None) -> None:
        planned = self._eager if graph_key is None else self._graphed.get(graph_key)
        if planned is None:
            indptr = torch.empty(len(cu_seqlens), dtype=torch.int32, device=self.device)  # [slots + 1], qo = kv
            planned = self._graphed[graph_key] = _Planned(self._new_wrapper(
                self.workspace, "NHD", use_cuda_graph=True, qo_indptr_buf=indptr, kv_indptr_buf=indptr,
                backend=self.backend))
        layout = cu_seqlens.numpy().tobytes()
        self._current = planned.wrapper
        if layout == planned.layout:
            return  # its buffers hold this plan already (a plan: ~0.1-0.2 ms of a batch-1 step's host time)
        planned.copied.synchronize()  # the previous plan's pinned buffer has been copied to the device
        planned.layout = None  # until this plan is through (a plan that raises leaves no layout to skip to)
        spec = self.spec
        planned.wrapper.plan(cu_seqlens, cu_seqlens, spec.num_heads, spec.num_kv_heads, spec.head_dim,
                             causal=spec.causal, sm_scale=spec.scale, q_data_type=self.dtype,
                             kv_data_type=self.dtype, disable_split_kv=graph_key is None)
        planned.copied.record()
        planned.layout = layout

    def forward(self, q, k, v):
        return self._current.run(q, k, v)


class _Planned:
    """A FlashInfer wrapper, the event recorded after its last plan's copies were queued, and the cu_seqlens
    (bytes) of that plan: a batch of the same layout runs on the plan as it is."""

    def __init__(self, wrapper):
        self.wrapper, self.copied = wrapper, torch.cuda.Event()
        self.copied.record()
        self.layout: bytes | None = None


class TorchVarlenAttention(AttentionBackend):
    """PyTorch's flash-attention varlen kernel (aten._flash_attention_forward): any head_dim <= 256.

    It reads cu_seqlens from the device; `max_q` bounds the longest sequence (the padding
    sequence included), sizes the kernel's grid and is baked into a captured graph. So the graph
    key adds the longest sequence's power-of-two bucket: with the batch's token count as the bound,
    a batch of 200 short rows launched blocks for 16,384-token sequences in every layer (Qwen3-0.6B
    on a corpus of 20-512 token rows, H200: 4,880 rows/s replayed vs 6,843 eager).
    """

    min_max_q = MIN_MAX_Q

    def __init__(self, spec: AttentionSpec, max_seqlen: int):
        super().__init__(spec)
        self.max_seqlen = max_seqlen
        self._cu_seqlens = None
        self._max_q = max_seqlen

    def graph_key(self, batch) -> tuple[int, int, int]:
        """(padded tokens, padded sequences, max_q): max_q a power of two >= the longest sequence, at
        least min_max_q, at most the model's positions and the batch's tokens."""
        longest = self._checked(batch.longest)
        max_q = min(max(self.min_max_q, 1 << (longest - 1).bit_length()), self.max_seqlen, batch.key[0])
        return (*batch.key, max_q)

    def plan(self, cu_seqlens: torch.Tensor, num_seqs: int, graph_key=None, device_cu_seqlens=None) -> None:
        # a graph keeps the max_q of its key (graph_key checked the lengths); an eager batch, its longest sequence
        self._max_q = graph_key[2] if graph_key is not None else self._checked(longest_sequence(cu_seqlens.numpy()))
        self._cu_seqlens = device_cu_seqlens

    def _checked(self, longest: int) -> int:
        if longest > self.max_seqlen:
            raise ValueError(f"a sequence of {longest} tokens is longer than the model's {self.max_seqlen} positions")
        return longest

    def forward(self, q, k, v):
        out = torch.ops.aten._flash_attention_forward(
            q, k, v, self._cu_seqlens, self._cu_seqlens, self._max_q, self._max_q, 0.0,
            self.spec.causal, False, scale=self.spec.scale)
        return out[0]


class TritonVarlenAttention(TorchVarlenAttention):
    """Our Triton kernel (triton_attention.varlen_attention): queries in blocks of 16-64 rows. Keys and plans as
    TorchVarlenAttention's (max_q sizes the grid and picks the launch configuration, so a graph bakes it in), with
    buckets from 64 rows: a 16-token query (a 64-token bucket) runs blocks of 16 rows, and batches of a few short
    queries do not split into 16- and 32-row keys, each captured apart (the server meets many such batches)."""

    min_max_q = 64

    def __init__(self, spec: AttentionSpec, max_seqlen: int):
        from embedpipe.kernels.cuda import triton_attention

        if not triton_attention.supports(spec.head_dim, spec.num_heads, spec.num_kv_heads):
            raise ValueError(f"the Triton attention kernel runs head_dim 16-128 (a power of two) and whole groups of "
                             f"query heads, not head_dim {spec.head_dim} with {spec.num_heads} query heads on "
                             f"{spec.num_kv_heads} key/value heads")
        super().__init__(spec, max_seqlen)
        self._kernel = triton_attention.varlen_attention

    @property
    def folds_qk_norm_rope(self) -> bool:
        """Up to FOLD_MAX_Q rows a sequence: past that each key block would be normed and rotated again for too
        many query blocks."""
        return self._max_q <= FOLD_MAX_Q

    def forward(self, q, k, v, qk_norm_rope=None):
        return self._kernel(q, k, v, self._cu_seqlens, self._max_q, self.spec.causal, self.spec.scale,
                            qk_norm_rope=qk_norm_rope)


class SelectedAttention(AttentionBackend):
    """Several backends, each running the batch sizes its range of the choice covers (attention_choice.py).

    A graph key ends with its backend's name (it starts with the padded tokens, as every key), so each graph
    captures the kernels of the backend that planned it."""

    def __init__(self, spec: AttentionSpec, backends: dict[str, AttentionBackend], choice: AttentionChoice):
        super().__init__(spec)
        self.backends, self.choice = backends, choice
        self._current = next(iter(backends.values()))

    def graph_key(self, batch) -> tuple:
        name = self.choice.backend_for(batch.key[0])
        return (*self.backends[name].graph_key(batch), name)

    def plan(self, cu_seqlens: torch.Tensor, num_seqs: int, graph_key=None, device_cu_seqlens=None) -> None:
        name = graph_key[-1] if graph_key is not None else self.choice.backend_for(int(cu_seqlens[-1]))
        self._current = self.backends[name]
        self._current.plan(cu_seqlens, num_seqs, None if graph_key is None else graph_key[:-1], device_cu_seqlens)

    @property
    def folds_qk_norm_rope(self) -> bool:
        return self._current.folds_qk_norm_rope

    def forward(self, q, k, v, **kwargs):
        return self._current.forward(q, k, v, **kwargs)


def machine_signature(device: torch.device) -> dict:
    """What a measured attention choice holds for: this GPU model with these torch and FlashInfer versions."""
    try:
        flashinfer_version = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        flashinfer_version = None
    return {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "flashinfer": flashinfer_version}


def choice_shape(spec: AttentionSpec, dtype: torch.dtype) -> str:
    """The key of this attention shape in the table of measured choices."""
    return shape_key(spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.causal, str(dtype).split(".")[1])


def candidate_backends(spec: AttentionSpec) -> list[str]:
    """The backends that can run this shape here, the safe default first: what `embedpipe warmup` times."""
    from embedpipe.kernels.cuda import triton_attention

    names = [SAFE_DEFAULT]
    if triton_attention.supports(spec.head_dim, spec.num_heads, spec.num_kv_heads):
        names.append("triton")
    if spec.head_dim in FLASHINFER_HEAD_DIMS and flashinfer_installed():
        names += ["fa2", "fa3"]
    return names


def flashinfer_installed() -> bool:
    return importlib.util.find_spec("flashinfer") is not None


def auto_choice(spec: AttentionSpec, device: torch.device, dtype: torch.dtype) -> AttentionChoice:
    """The choice `embedpipe warmup` measured for this shape on this machine, else the safe default."""
    if len(candidate_backends(spec)) == 1:
        return default_choice(f"head_dim {spec.head_dim}: the one kernel that runs it")
    return load_choice(machine_signature(device), choice_shape(spec, dtype))


def make_cuda_attention(name: str, spec: AttentionSpec, device: torch.device, dtype: torch.dtype,
                        max_seqlen: int, max_graph_tokens: int) -> AttentionBackend:
    """name: auto | flashinfer | fa2 | fa3 | torch-varlen | triton | torch. The backend's `choice` says what runs and
    why.

    auto: per batch size, the backend `embedpipe warmup` measured fastest here (attention_choice.py), else
    PyTorch's flash varlen kernel, the one ragged kernel that runs every head_dim here (32 included).
    FlashInfer (fa2, fa3) replays in CUDA graphs too (see FlashInferAttention). float32, which no flash
    kernel runs, takes the exact per-sequence SDPA backend, without CUDA graphs.
    """
    if dtype == torch.float32 or name == "torch":
        backend: AttentionBackend = TorchRaggedAttention(spec)
        reason = "--attention" if name == "torch" else "float32: exact per-sequence SDPA"
        backend.choice = single_choice("torch", reason)
        return backend
    if name != "auto":
        backend = _one_backend(name, spec, device, dtype, max_seqlen, max_graph_tokens)
        backend.choice = single_choice(name, "--attention")
        return backend
    choice = auto_choice(spec, device, dtype)
    backends = {b: _one_backend(b, spec, device, dtype, max_seqlen, max_graph_tokens) for b in choice.backends}
    backend = next(iter(backends.values())) if len(backends) == 1 else SelectedAttention(spec, backends, choice)
    backend.choice = choice
    return backend


def _one_backend(name: str, spec: AttentionSpec, device: torch.device, dtype: torch.dtype, max_seqlen: int,
                 max_graph_tokens: int) -> AttentionBackend:
    if name in ("flashinfer", "fa2", "fa3"):
        return FlashInferAttention(spec, device, dtype, "fa2" if name == "flashinfer" else name, max_graph_tokens)
    if name == "torch-varlen":
        return TorchVarlenAttention(spec, max_seqlen)
    if name == "triton":
        return TritonVarlenAttention(spec, max_seqlen)
    raise ValueError(f"unknown attention backend {name!r}; choose auto, flashinfer, fa2, fa3, torch-varlen or triton")
