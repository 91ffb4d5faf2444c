"""Times the CUDA attention backends on one attention shape: what `embedpipe warmup` stores (attention_choice.py).

Each backend runs each measured size as the engine runs it: planned on the host, captured in a CUDA graph with one
layout of sequences, then replayed after a plan of another layout of the same graph key (eagerly past the engine's
graph limit, as the engine runs such a batch). A backend whose first layer's output on that layout differs from
its eager run (per row cosine below 0.999), or that fails, is left out.

A timed step is what a step of the engine adds for its attention: the host plan of a new layout (the layouts
alternate, so no plan is skipped), the cu_seqlens copy, then the model's `layers` attention calls. So a backend
whose plan costs host time (FlashInfer's: ~0.26 ms a BERT-base 1 x 128 step, 2026-12-01) pays it where the device
would wait for it, at small batches, and not at large ones, where the device's work hides it. Each backend is timed
ROUNDS times, in turns with the others, and keeps the median.
"""
from __future__ import annotations

import statistics
import time

import torch

from embedpipe.kernels.attention import AttentionSpec
from embedpipe.kernels.attention_choice import store_choice
from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.cuda.attention import candidate_backends, choice_shape, machine_signature, make_cuda_attention

MEASURED_SHAPES = ((1, 128), (8, 256), (64, 512))  # (sequences, tokens each): batches of 128, 2048, 32768 tokens
STEPS = 50
ROUNDS = 3  # each backend timed this many times, in turns with the others: time_backends


def measure_and_store(spec: AttentionSpec, device: torch.device, dtype: torch.dtype, max_seqlen: int,
                      layers: int = 12, max_graph_tokens: int = 16384
                      ) -> tuple[dict[int, dict[str, float]], dict[str, str]]:
    """Times the backends that can run this shape here and stores the choice; ({}, {}) when only one can."""
    backends = candidate_backends(spec)
    if dtype == torch.float32 or len(backends) == 1:
        return {}, {}
    timings, failed = time_backends(spec, device, dtype, max_seqlen, backends, layers, max_graph_tokens)
    if timings:
        store_choice(machine_signature(device), choice_shape(spec, dtype), timings, failed,
                     time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    return timings, failed


def time_backends(spec: AttentionSpec, device: torch.device, dtype: torch.dtype, max_seqlen: int,
                  backends: list[str], layers: int = 12, max_graph_tokens: int = 16384
                  ) -> tuple[dict[int, dict[str, float]], dict[str, str]]:
    """({padded tokens: {backend: ms per step, the median of ROUNDS timings}}, {backend: why it was left out}).
    The backends take turns round after round, so a passing disturbance moves one sample of a backend, not its
    figure: in one warmup on an H100 fa3's Qwen3-0.6B steps at 128 and 2,048 tokens took 0.357 and 0.582 ms, in six
    timings of two other processes 0.200-0.210 and 0.432-0.459, and the choice moved fa3's range from above 512
    tokens to above 8,192 (results/2026-12-06-h200-qkv-pdl, calls 2 and 4)."""
    max_tokens = max(n * length for n, length in MEASURED_SHAPES)
    attns: dict[str, object] = {}
    samples: dict[str, dict[int, list[float]]] = {}
    failed: dict[str, str] = {}
    for _ in range(ROUNDS):
        for name in (b for b in backends if b not in failed):
            try:
                if name not in attns:
                    attns[name] = make_cuda_attention(name, spec, device, dtype, max_seqlen, max_tokens)
                measured = [_time_shape(attns[name], spec, device, dtype, layers, max_graph_tokens, *shape)
                            for shape in MEASURED_SHAPES]
            except Exception as error:  # noqa: BLE001 - e.g. a kernel that does not compile or run this shape here
                failed[name] = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                samples.pop(name, None)
                attns.pop(name, None)
                continue
            for tokens, ms in measured:
                samples.setdefault(name, {}).setdefault(tokens, []).append(ms)
    timings: dict[int, dict[str, float]] = {}
    for name, by_size in samples.items():
        for tokens, values in by_size.items():
            timings.setdefault(tokens, {})[name] = statistics.median(values)
    return timings, failed


def _layers(attn, q, k, v, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`layers` attention calls, each one's output the next one's queries (a model's layers depend on each other)
    -> (the first call's output, the last's). The checks read the first: after a few calls every row tends to its
    sequence's mean of v, whatever its queries, and a wrong layout would hardly show."""
    first = q = attn.forward(q, k, v)
    for _ in range(layers - 1):
        q = attn.forward(q, k, v)
    return first, q


def _time_shape(attn, spec: AttentionSpec, device, dtype, layers: int, max_graph_tokens: int, num_seqs: int,
                length: int) -> tuple[int, float]:
    """(padded tokens, ms per step) of one batch size: replayed as a graph, or eagerly past max_graph_tokens (as the
    engine runs it), each step after the host plan of the other layout than the step before."""
    policy = BucketPolicy()
    captured = pack([[1] * length] * num_seqs, policy)
    # other lengths, same graph key: each a token or two shorter (the same padded buckets, no longer maximum)
    replayed = pack([[1] * (length - (i + 1) % 3) for i in range(num_seqs)], policy)
    key = attn.graph_key(captured)
    if attn.graph_key(replayed) != key:
        raise AssertionError(f"the timing layouts of {num_seqs} x {length} have different graph keys")
    num_tokens = captured.key[0]
    q = torch.randn(num_tokens, spec.num_heads, spec.head_dim, device=device, dtype=dtype)
    k, v = (torch.randn(num_tokens, spec.num_kv_heads, spec.head_dim, device=device, dtype=dtype) for _ in range(2))
    layouts = [b.cu_seqlens.pin_memory() for b in (captured, replayed)]
    static_cu = layouts[0].to(device)
    step = (_eager_step if num_tokens > max_graph_tokens else _graph_step)(attn, q, k, v, layers, key, static_cu,
                                                                            layouts[0], num_seqs)
    attn.plan(layouts[1], num_seqs, None, layouts[1].to(device))
    eager = _layers(attn, q, k, v, 1)[0]
    got = step(layouts[1])
    real = int(layouts[1][num_seqs])
    agreement = torch.nn.functional.cosine_similarity(got[:real].float().flatten(1), eager[:real].float().flatten(1))
    if agreement.min().item() < 0.999:
        raise AssertionError(f"the timed step differs from eager at {num_seqs} x {length} "
                             f"(min cosine {agreement.min().item():.4f})")
    for i in range(6):
        step(layouts[i % 2])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(STEPS):
        step(layouts[i % 2])
    end.record()
    end.synchronize()
    return num_tokens, start.elapsed_time(end) / STEPS


def _graph_step(attn, q, k, v, layers, key, static_cu, captured_layout, num_seqs):
    """A step that plans a layout, copies its cu_seqlens into the graph's buffer and replays the graph captured with
    captured_layout; it returns the first layer's output."""
    attn.plan(captured_layout, num_seqs, key, static_cu)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        first, _ = _layers(attn, q, k, v, layers)

    def step(layout):
        static_cu.copy_(layout, non_blocking=True)
        attn.plan(layout, num_seqs, key, static_cu)
        graph.replay()
        return first
    return step


def _eager_step(attn, q, k, v, layers, key, static_cu, captured_layout, num_seqs):
    """A step that plans a layout and runs the layers eagerly (a batch past the graphs' token limit)."""
    def step(layout):
        static_cu.copy_(layout, non_blocking=True)
        attn.plan(layout, num_seqs, None, static_cu)
        return _layers(attn, q, k, v, layers)[0]
    return step
