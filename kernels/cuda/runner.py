"""Runs packed batches on one CUDA device without waiting for it.

Per batch: the host inputs go into a pinned staging buffer, one async copy moves them to the
device (into the graph's static buffer when the batch replays a graph), attention is planned on
the host, the forward pass runs (eagerly, captured, or replayed), and an async copy moves the
pooled rows into a pinned output buffer. `step()` returns a LazyTensor at once.

Reused buffers are guarded: a pinned staging or output slot is reused only after the device has
finished reading or writing it (events), and a slot's previous LazyTensor is resolved first.

Batches with spans (late chunking) always run eagerly, through the same staging, plan and download. An engine
whose model takes token types (a BERT cross-encoder) stages them after cu_seqlens in every batch (zeros for a batch
without them), so its graphs read them from their static buffer; an embedding engine stages none.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from embedpipe.kernels.attention import AttentionBackend
from embedpipe.kernels.batch import Batch
from embedpipe.kernels.graph_cache import GraphCache, GraphConfig
from embedpipe.kernels.lazy_tensor import LazyTensor

MAX_VIEWS = 256  # views PinnedSlots keeps a slot (a graph key's batches ask for the same few)


class PinnedSlots:
    """Round-robin pinned host buffers of [rows, *row_shape], each with its own CUDA event: num_slots of
    them, one per batch in flight plus the one being prepared (CudaRunner).

    `take()` returns a slot the device no longer uses: it waits on the slot's event, and first
    resolves the LazyTensor that still reads the slot, if any. Its views of a slot's buffer (`view`, `array`) are
    made once per range: a torch slice or .numpy() costs ~1-3 us, a batch-1 step's host part ~20 us.
    """

    def __init__(self, dtype: torch.dtype, row_shape: tuple[int, ...] = (), *, num_slots: int,
                 make_event=torch.cuda.Event, pin: bool = True):
        self.dtype, self.row_shape, self.pin, self.num_slots = dtype, row_shape, pin, num_slots
        self.buffers = [torch.empty((0, *row_shape), dtype=dtype)] * num_slots
        self.events = [make_event() for _ in range(num_slots)]
        self.readers: list[LazyTensor | None] = [None] * num_slots
        self._views: list[dict] = [{} for _ in range(num_slots)]  # per slot: (start, stop[, "numpy"]) -> view
        self.next = 0

    def take(self, rows: int) -> tuple[int, torch.Tensor]:
        slot, self.next = self.next, (self.next + 1) % self.num_slots
        if self.readers[slot] is not None:
            self.readers[slot].release()  # it copies the rows out before the slot is overwritten
            self.readers[slot] = None
        self.events[slot].synchronize()
        if self.buffers[slot].shape[0] < rows:
            capacity = max(rows, 2 * self.buffers[slot].shape[0])
            buffer = torch.empty((capacity, *self.row_shape), dtype=self.dtype)
            self.buffers[slot] = buffer.pin_memory() if self.pin else buffer
            self._views[slot].clear()
        return slot, self.view(slot, 0, rows)

    def view(self, slot: int, start: int, stop: int) -> torch.Tensor:
        """Rows [start, stop) of the slot's buffer (within what the last take asked for)."""
        views = self._views[slot]
        view = views.get((start, stop))
        if view is None:
            if len(views) >= MAX_VIEWS:  # late-chunked batches' sizes vary without bound
                views.clear()
            view = views[start, stop] = self.buffers[slot][start:stop]
        return view

    def array(self, slot: int, rows: int) -> np.ndarray:
        """The first rows of the slot's buffer as a numpy array (the buffer's memory)."""
        views = self._views[slot]
        array = views.get((0, rows, "numpy"))
        if array is None:
            array = views[0, rows, "numpy"] = self.view(slot, 0, rows).numpy()
        return array


def stage_inputs(batch: Batch, out: np.ndarray, token_types: bool = False) -> None:
    """Writes [input_ids | cu_seqlens] (int32) into `out` (positions and slots are computed on the device), and with
    token_types [input_ids | cu_seqlens | token_type_ids] (a batch without types: zeros)."""
    num_tokens, end_cu = cu_span(batch)
    ids, cu = batch.arrays
    out[:num_tokens] = ids
    out[num_tokens:end_cu] = cu
    if token_types:
        out[end_cu:] = 0 if batch.token_type_ids is None else batch.token_type_ids.numpy()


def cu_span(batch: Batch) -> tuple[int, int]:
    """Where cu_seqlens lies in the staged inputs: [num_tokens, end)."""
    num_tokens, num_slots = batch.key
    return num_tokens, num_tokens + num_slots + 1


def staged_size(batch: Batch, token_types: bool) -> int:
    """int32 values stage_inputs writes for the batch."""
    num_tokens, end_cu = cu_span(batch)
    return end_cu + (num_tokens if token_types else 0)


class CudaRunner:
    """forward(ids, cu_seqlens, token_type_ids | None) -> [num_slots, width] on the device, run lazily;
    forward_spans(ids, cu_seqlens, span_bounds) -> [num_spans, width] for batches with spans. token_types: whether
    forward takes token types (staged in every batch)."""

    def __init__(self, forward: Callable, forward_spans: Callable, attn: AttentionBackend, device: torch.device,
                 graphs: GraphConfig, out_dtype: torch.dtype, out_width: int, spin_wait: bool = True,
                 max_in_flight: int = 3, token_types: bool = False):
        if not attn.graph_safe:
            graphs = GraphConfig(enabled=False)
        self.forward, self.forward_spans, self.attn, self.device = forward, forward_spans, attn, device
        self.token_types = token_types
        self.graphs = GraphCache(graphs)
        self.pool = torch.cuda.graph_pool_handle()
        # a blocking event makes a waiting host thread sleep instead of spin (EngineConfig.spin_wait)
        make_event = lambda: torch.cuda.Event(blocking=not spin_wait)
        # a slot per batch in flight (batching/in_flight.py keeps at most max_in_flight) and the one being prepared
        slots = max_in_flight + 1
        self.staging = PinnedSlots(torch.int32, num_slots=slots, make_event=make_event)
        self.outputs = PinnedSlots(out_dtype, (out_width,), num_slots=slots, make_event=make_event)
        # events are recorded on the engine's stream, named once: Event.record() with no stream looks up
        # the current one in Python, ~5% of the index job's feeding thread on MiniLM (py-spy, H200)
        self.stream = torch.cuda.current_stream(device)

    @property
    def counters(self):
        return self.graphs.counters

    def captured_graph(self, batch: Batch) -> torch.cuda.CUDAGraph | None:
        """The graph captured for this batch's key, if any (benchmarks replay it alone)."""
        entry = self.graphs.entries.get(self.attn.graph_key(batch))
        return None if entry is None else entry[0]

    def step(self, batch: Batch) -> LazyTensor:
        if batch.span_bounds is not None:
            return self._step_spans(batch)
        num_tokens, end_cu = cu_span(batch)
        rows = staged_size(batch, self.token_types)
        slot, host = self.staging.take(rows)
        stage_inputs(batch, self.staging.array(slot, rows), self.token_types)
        host_cu = self.staging.view(slot, num_tokens, end_cu)

        def eager():
            inputs = host.to(self.device, non_blocking=True)
            self.attn.plan(host_cu, batch.num_seqs, None, inputs[num_tokens:end_cu])
            return self._forward(inputs, batch)

        key = self.attn.graph_key(batch)
        out = self.graphs.run(key, eager, lambda: self._capture(batch, host, host_cu, key),
                              lambda entry: self._replay(batch, host, host_cu, key, entry))
        self.staging.events[slot].record(self.stream)
        return self._download(out, batch.num_seqs)

    def _step_spans(self, batch: Batch) -> LazyTensor:
        """A late-chunked batch, eagerly: no graph is captured or replayed for it. Its sequences are long
        documents (thousands of tokens each), so the launches that a graph saves are a small part of its time,
        and its span count, which a graph would fix, varies from batch to batch. Staged in one pinned copy,
        [input_ids | cu_seqlens | span_bounds]; attention is planned for the documents, as for any batch."""
        num_tokens, end_cu = cu_span(batch)
        slot, host = self.staging.take(end_cu + 2 * batch.num_spans)
        stage_inputs(batch, self.staging.array(slot, end_cu))
        host[end_cu:].view(-1, 2).copy_(batch.span_bounds)
        inputs = host.to(self.device, non_blocking=True)
        self.attn.plan(host[num_tokens:end_cu], batch.num_seqs, None, inputs[num_tokens:end_cu])
        out = self.forward_spans(inputs[:num_tokens], inputs[num_tokens:end_cu], inputs[end_cu:].view(-1, 2))
        self.staging.events[slot].record(self.stream)
        self.graphs.counters.eager += 1
        return self._download(out, batch.num_spans)

    def _forward(self, inputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        """inputs: the staged [input_ids | cu_seqlens (| token_type_ids)] on the device."""
        num_tokens, end_cu = cu_span(batch)
        types = inputs[end_cu:] if self.token_types else None
        return self.forward(inputs[:num_tokens], inputs[num_tokens:end_cu], types)

    def _capture(self, batch: Batch, host: torch.Tensor, host_cu: torch.Tensor, key: tuple):
        """Captures the forward pass for this batch's key; returns (graph, static inputs, static output, the static
        inputs' cu_seqlens)."""
        num_tokens, end_cu = cu_span(batch)
        inputs_buf = torch.empty_like(host, device=self.device)
        inputs_buf.copy_(host, non_blocking=True)
        device_cu = inputs_buf[num_tokens:end_cu]
        self.attn.plan(host_cu, batch.num_seqs, key, device_cu)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out_buf = self._forward(inputs_buf, batch)
        return graph, inputs_buf, out_buf, device_cu

    def _replay(self, batch: Batch, host: torch.Tensor, host_cu: torch.Tensor, key: tuple, entry) -> torch.Tensor:
        graph, inputs_buf, out_buf, device_cu = entry
        inputs_buf.copy_(host, non_blocking=True)
        self.attn.plan(host_cu, batch.num_seqs, key, device_cu)
        graph.replay()
        return out_buf

    def _download(self, out: torch.Tensor, num_rows: int) -> LazyTensor:
        """The first num_rows rows of out (a row per sequence, or per span) into a pinned slot, asynchronously."""
        slot, host = self.outputs.take(num_rows)
        host.copy_(out[:num_rows], non_blocking=True)
        self.outputs.events[slot].record(self.stream)
        lazy = LazyTensor(host, self.outputs.events[slot], keepalive=out)
        self.outputs.readers[slot] = lazy
        return lazy
