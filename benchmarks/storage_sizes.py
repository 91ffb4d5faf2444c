"""Bytes on disk per embedding value of each output dtype: `embedpipe index` on the same corpus, once per --dtype.

    python benchmarks/storage_sizes.py [--rows 4000] [--out benchmarks/results/DATE-cpu-storage]

The corpus is examples/sample.parquet's texts repeated with a row number (real MiniLM vectors, as
the engine quantises them). Reported from the unit files' Parquet metadata: the `embedding`
column's compressed bytes over its values (binary: over its dimensions, 8 a byte), and the ratio
to float32. Sizes, not times: one run per dtype is exact.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from common import environment, write_results

DTYPES = ("float32", "float16", "int8", "binary")
SAMPLE = Path(__file__).parent.parent / "examples" / "sample.parquet"


def embedding_bytes(output: Path) -> tuple[int, int]:
    """(compressed bytes of the embedding column, rows) over the unit files of an output."""
    total = rows = 0
    for path in sorted((output / "embeddings").glob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            rows += group.num_rows
            total += sum(group.column(c).total_compressed_size for c in range(group.num_columns)
                         if group.column(c).path_in_schema.startswith("embedding"))
    return total, rows


def measure(rows: int, folder: Path) -> dict:
    texts = pq.read_table(SAMPLE).column("text").to_pylist()
    corpus = folder / "in.parquet"
    pq.write_table(pa.table({"id": list(range(rows)), "text": [f"{texts[i % len(texts)]} ({i})" for i in range(rows)]}),
                   corpus, row_group_size=1000)
    results = {}
    for dtype in DTYPES:
        output = folder / dtype
        done = subprocess.run([sys.executable, "-m", "embedpipe.cli.main", "index", str(corpus),
                               "--output", str(output), "--dtype", dtype, "--device", "cpu", "--quiet"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{dtype}: {done.stderr}")
        size, num_rows = embedding_bytes(output)
        dim = json.loads((output / "job.json").read_text())["dim"]
        results[dtype] = {"bytes": size, "rows": num_rows, "dim": dim, "bytes_per_dimension": size / (num_rows * dim)}
    for row in results.values():
        row["float32_over_this"] = results["float32"]["bytes"] / row["bytes"]
    return results


def table(results: dict) -> str:
    lines = ["| --dtype | bytes per dimension on disk | float32 / this |", "|---|---|---|"]
    lines += [f"| {dtype} | {row['bytes_per_dimension']:.3f} | {row['float32_over_this']:.1f}x |"
              for dtype, row in results.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path("out/storage-sizes"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = measure(args.rows, Path(folder))
    write_results({"environment": environment(), "rows": args.rows, "model": "minilm", "dtypes": results},
                  args.out, table(results))
    print(table(results))


if __name__ == "__main__":
    main()
