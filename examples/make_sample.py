"""Writes examples/sample.parquet (id, text): the 240 test texts and 160 pairs of them."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

here = Path(__file__).parent
texts = [json.loads(line)["text"] for line in (here.parent / "tests" / "data" / "texts.jsonl").read_text().splitlines()]
rows = texts + [f"{texts[i]} {texts[(i * 7 + 3) % len(texts)]}" for i in range(160)]
table = pa.table({"id": [f"doc-{i:04d}" for i in range(len(rows))], "text": rows})
pq.write_table(table, here / "sample.parquet", row_group_size=100, compression="zstd")
