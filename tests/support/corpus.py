"""Small Parquet corpora for the index tests, made from tests/data/texts.jsonl."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq

from support.paths import DATA
from support.numerics import cosine

TEXTS = [json.loads(line)["text"] for line in (DATA / "texts.jsonl").read_text().splitlines()]


def variant_texts(num_rows: int) -> list[str]:
    """The 240 texts, then the shorter ones again with a few words of another text appended (unique);
    every 50th row repeats an earlier row's text."""
    short = [text for text in TEXTS if len(text) < 150]
    texts = []
    for row in range(num_rows):
        round_, base = divmod(row - len(TEXTS), len(short))
        if row and row % 50 == 0:
            texts.append(texts[row // 2])
        elif row < len(TEXTS):
            texts.append(TEXTS[row])
        else:
            words = TEXTS[(base * 7 + round_ * 13) % len(TEXTS)].split()[:1 + round_ % 3]
            texts.append(f"{short[base]} ({round_}: {' '.join(words)})")
    return texts


def write_corpus(folder: Path, texts: list[str], num_files: int, row_group_size: int,
                 first_id: int = 1000) -> list[Path]:
    """Parquet files part-0..: columns id (int64, unique), text and source (kept in some tests)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for part, rows in enumerate(np.array_split(np.arange(len(texts)), num_files)):
        table = pa.table({"id": pa.array(rows + first_id, pa.int64()), "text": [texts[r] for r in rows],
                          "source": [f"part-{part}" for _ in rows]})
        paths.append(folder / f"part-{part}.parquet")
        pq.write_table(table, paths[-1], row_group_size=row_group_size)
    return paths


def read_embeddings(output: Path) -> pa.Table:
    """All rows of OUTPUT/embeddings, sorted by id."""
    table = pds.dataset(output / "embeddings", format="parquet").to_table()
    return table.sort_by(table.column_names[0])


def vectors_of(table: pa.Table) -> np.ndarray:
    column = table.column("embedding").combine_chunks()
    return np.array(column.flatten().to_numpy().reshape(len(table), column.type.list_size))  # writable


def assert_same_output(output: Path, reference: Path) -> None:
    """Two index runs wrote the same units (rows in the same order, vectors within float error),
    rejected rows, index ids and settings."""
    assert sorted(os.listdir(output / "embeddings")) == sorted(os.listdir(reference / "embeddings"))
    for name in os.listdir(reference / "embeddings"):  # each unit file: the same rows in the same order
        ours, theirs = pq.read_table(output / "embeddings" / name), pq.read_table(reference / "embeddings" / name)
        assert ours.drop(["embedding"]).equals(theirs.drop(["embedding"]))
        assert cosine(vectors_of(ours), vectors_of(theirs)).min() >= 0.99999
    assert pq.read_table(output / "rejected.parquet").sort_by("id").equals(
        pq.read_table(reference / "rejected.parquet").sort_by("id"))
    assert pq.read_table(output / "index_ids.parquet").equals(pq.read_table(reference / "index_ids.parquet"))
    assert json.loads((output / "job.json").read_text()) == json.loads((reference / "job.json").read_text())


def index_command(*args, command: str = "index") -> list[str]:
    return [sys.executable, "-m", "embedpipe.cli.main", command, *map(str, args)]


def run_index(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(index_command(*args), capture_output=True, text=True, timeout=timeout)
