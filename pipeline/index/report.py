"""What each engine of a run did, and the run's metrics, which add up the reports of all its engines."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from embedpipe.kernels.graph_cache import GraphCounters

from embedpipe.pipeline.batching.batcher import BatchStats


@dataclass
class EngineReport:
    """One engine's share of a run: units written, rows, tokens, batches and graph counters."""

    device: str
    units: int = 0
    rows: int = 0
    tokens: int = 0
    rejected: int = 0
    truncated: int = 0
    batches: BatchStats = field(default_factory=BatchStats)
    graphs: dict[str, int] = field(default_factory=lambda: GraphCounters().as_dict())  # eager runs, captures, replays
    bad_files: list[dict] = field(default_factory=list)
    out_of_memory_splits: int = 0  # batches split in two after the device ran out of memory
    main_thread_cpu_s: float = 0.0  # CPU time of the thread that fed the engine, and of its writer thread
    writer_thread_cpu_s: float = 0.0
    chunk_wait_s: float = 0.0  # that thread's wall time getting chunks (RunCounts), and for the first
    first_chunk_s: float = 0.0
    attention: str = ""  # the attention backend the engine runs, and why (AttentionChoice.describe)
    input_rows: int = 0  # the input rows of `rows` (with --chunk-tokens, rows are their windows)

    def __add__(self, other: EngineReport) -> EngineReport:
        """Both reports summed, under this report's device."""
        graphs = {key: self.graphs.get(key, 0) + other.graphs.get(key, 0) for key in self.graphs | other.graphs}
        return EngineReport(self.device, self.units + other.units, self.rows + other.rows,
                            self.tokens + other.tokens, self.rejected + other.rejected,
                            self.truncated + other.truncated, self.batches + other.batches, graphs,
                            self.bad_files + other.bad_files, self.out_of_memory_splits + other.out_of_memory_splits,
                            self.main_thread_cpu_s + other.main_thread_cpu_s,
                            self.writer_thread_cpu_s + other.writer_thread_cpu_s,
                            self.chunk_wait_s + other.chunk_wait_s, max(self.first_chunk_s, other.first_chunk_s),
                            self.attention or other.attention, self.input_rows + other.input_rows)

    def since(self, earlier: EngineReport) -> EngineReport:
        """What this engine did after `earlier`, an earlier report of its running totals: `earlier +
        report.since(earlier)` is this report again (a running engine reports unit by unit this way)."""
        graphs = {key: count - earlier.graphs.get(key, 0) for key, count in self.graphs.items()}
        return EngineReport(self.device, self.units - earlier.units, self.rows - earlier.rows,
                            self.tokens - earlier.tokens, self.rejected - earlier.rejected,
                            self.truncated - earlier.truncated, self.batches - earlier.batches, graphs,
                            self.bad_files[len(earlier.bad_files):],
                            self.out_of_memory_splits - earlier.out_of_memory_splits,
                            self.main_thread_cpu_s - earlier.main_thread_cpu_s,
                            self.writer_thread_cpu_s - earlier.writer_thread_cpu_s,
                            self.chunk_wait_s - earlier.chunk_wait_s, self.first_chunk_s, self.attention,
                            self.input_rows - earlier.input_rows)


def run_metrics(reports: list[EngineReport], seconds: float) -> dict:
    """The run's counters (metrics.json), over all engines; `engines` lists each engine's share."""
    total = sum(reports, EngineReport(""))
    seconds = max(seconds, 1e-9)
    return {"rows": total.rows, "tokens": total.tokens, "rejected_rows": total.rejected,
            "truncated_texts": total.truncated, "padding_waste": total.batches.padding_waste,
            "batches": total.batches.batches, "seconds": seconds, "tokens_per_s": total.tokens / seconds,
            "embeddings_per_s": total.rows / seconds, "out_of_memory_splits": total.out_of_memory_splits,
            "host_cpu_s": {"main_thread": total.main_thread_cpu_s, "writer_thread": total.writer_thread_cpu_s},
            "chunk_wait_s": {"all": total.chunk_wait_s, "first": total.first_chunk_s},
            "engine": {**total.graphs, "device": ", ".join(report.device for report in reports),
                       "attention": total.attention},
            "engines": [{"device": r.device, "units": r.units, "rows": r.rows, "tokens": r.tokens,
                         "attention": r.attention} for r in reports]}


def process_age_s() -> float | None:
    """Seconds since this process started (the interpreter's start and the imports included), from
    Linux's /proc at its clock-tick resolution; None elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in ticks since boot
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return None
