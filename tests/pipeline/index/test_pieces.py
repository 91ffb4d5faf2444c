"""How a unit is cut into the pieces the tokenizer workers read: read_rows at most, and enough for every worker."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from embedpipe.pipeline.index.reader import pieces_of
from embedpipe.pipeline.inputs.sources import WorkUnit


@pytest.fixture
def unit(tmp_path):
    """One unit of 400 rows in 4 row groups."""
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": range(400), "text": ["x"] * 400}), path, row_group_size=100)
    return WorkUnit("docs.parquet:0", str(path), "parquet", 0, 4, "docs.parquet")


@pytest.mark.parametrize("read_rows, num_workers, expected", [
    (1024, 1, [(0, 400)]),  # one worker: the whole unit at once, as before
    (128, 1, [(0, 128), (128, 256), (256, 384), (384, 400)]),
    (1024, 15, [(a, min(a + 27, 400)) for a in range(0, 400, 27)]),  # a piece for each of 15 workers
    (16, 15, [(a, a + 16) for a in range(0, 400, 16)]),  # read_rows stays the most
    (1024, 1000, [(a, a + 1) for a in range(400)]),
])
def test_pieces_cover_the_unit_in_order(unit, read_rows, num_workers, expected):
    pieces = pieces_of(unit, read_rows, num_workers)
    assert [p.rows for p in pieces] == expected
    assert [p.last for p in pieces] == [False] * (len(pieces) - 1) + [True]
