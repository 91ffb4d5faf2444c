"""Long texts for the window tests (--chunk-tokens, --late-chunking), and the windows an index job wrote."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

from support.corpus import TEXTS


def long_docs(num_docs: int, seed: int = 0) -> list[str]:
    """Texts of 1 to 8 corpus texts each (most longer than one window), a text of special tokens only, one of
    control characters only (no tokens at all) and an empty one (rejected)."""
    rng = random.Random(seed)
    docs = [rng.choice([" ", "\n\n", ""]).join(rng.sample(TEXTS, rng.randint(1, 8))) for _ in range(num_docs - 3)]
    return docs[:4] + ["[CLS] [SEP] [MASK]", "\x00\x01\x02", ""] + docs[4:]


def write_docs(folder, docs: list[str], row_group_size: int):
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": pa.array(range(100, 100 + len(docs)), pa.int64()), "text": docs,
                      "title": [f"title {i}" for i in range(len(docs))]})
    pq.write_table(table, folder / "docs.parquet", row_group_size=row_group_size)
    return folder


def windows_of(output) -> pa.Table:
    """All rows of OUTPUT/embeddings in unit order (the index's order)."""
    files = sorted(p for p in (output / "embeddings").glob("[!.]*.parquet"))
    return pa.concat_tables([pq.read_table(path) for path in files])


def sorted_windows(output) -> pa.Table:
    table = windows_of(output)
    return table.sort_by([("id", "ascending"), ("chunk", "ascending")])
