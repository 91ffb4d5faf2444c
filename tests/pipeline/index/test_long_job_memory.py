"""The job holds no memory per row processed: Python and Arrow heap after each unit, over 16 units.

RSS is too noisy for a short run (the allocator keeps freed pages); the Python heap (tracemalloc)
plus Arrow's memory pool are exact, and hold every structure of the pipeline (the CPU engine's
tensors aside: benchmarks/long_job_memory.py measures RSS over 200,000 rows).
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pyarrow as pa
from typer.testing import CliRunner

from support.corpus import variant_texts, write_corpus
from embedpipe.cli.main import app
from embedpipe.pipeline.index import runner, unit_files

NUM_UNITS = 16
ROWS_PER_UNIT = 100


def test_heap_after_each_unit_does_not_grow_with_the_rows(tmp_path, tiny_model, monkeypatch):
    texts = [f"row {row}: {text[:80]}" for row, text in enumerate(variant_texts(NUM_UNITS * ROWS_PER_UNIT))]
    write_corpus(tmp_path / "in", texts, num_files=4, row_group_size=ROWS_PER_UNIT)
    held = []

    def mark_done_and_measure(*args):
        mark_done(*args)
        gc.collect()
        held.append(tracemalloc.get_traced_memory()[0] + pa.total_allocated_bytes())

    mark_done = unit_files.mark_done
    monkeypatch.setattr(unit_files, "mark_done", mark_done_and_measure)
    # the vectors a Flat index's build is handed grow with the rows by design, within their budget
    # (test_index_job); with none kept, this guards everything else
    monkeypatch.setattr(runner, "in_memory_budget", lambda: 0)
    tracemalloc.start()
    try:
        result = CliRunner().invoke(app, ["index", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                                          "--model", str(tiny_model), "--device", "cpu", "--quiet",
                                          "--rows-per-unit", str(ROWS_PER_UNIT), "--max-batch-tokens", "1024"])
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output
    assert len(held) == NUM_UNITS
    # after warm-up, the typical growth from one unit to the next, per 1,000 rows: a median, so a one-time
    # step (a cache filling, CPython's interned-string table resizing) is not taken for growth per row
    per_unit = float(np.median(np.diff(held[4:])))
    growth = per_unit * 1000 / ROWS_PER_UNIT
    assert growth < 100_000, f"{growth:,.0f} bytes more held per 1,000 more rows: {held}"
