"""What a user would otherwise write: a Parquet corpus -> sentence-transformers -> Parquet + FAISS (suite 5's peer).

    python benchmarks/st_index.py CORPUS.parquet MODEL_FOLDER OUT_DIR [--batch-size 256] [--device cuda]
        [--default-batch-rows N]   # afterwards: encode the first N texts again at sentence-transformers' default, 32

pyarrow reads the texts; SentenceTransformer(folder, device="cuda", model_kwargs={"torch_dtype": torch.bfloat16})
encodes them with `encode(texts, batch_size=256)` (its own tokenising, length-sorted batches, pooling); pyarrow
writes ids and vectors; FAISS builds an IndexFlatIP and writes it. OUT_DIR/timings.json gets each phase's
seconds; the caller times the whole process (its wall, the interpreter and imports included).
"""
from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402


def full_attention(model) -> None:
    """pplx-embed-shaped folders (use_bidirectional_attention): stock transformers runs Qwen3 causally, pplx-embed's
    own code (trust_remote_code) lets every token see its whole text; the full mask here does what that code does."""
    from common import attention_mask
    auto_model = model[0].auto_model
    forward = auto_model.forward

    def bidirectional_forward(*args, attention_mask=None, **kwargs):
        return forward(*args, attention_mask=attention_mask_4d(attention_mask, True), **kwargs)

    attention_mask_4d = attention_mask
    auto_model.forward = bidirectional_forward


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("model", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--default-batch-rows", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from sentence_transformers import SentenceTransformer
    import faiss  # noqa: I001 (after torch, as its users import it)
    times = {"imports_s": time.perf_counter() - START}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        times[name], clock = time.perf_counter() - clock, time.perf_counter()

    table = pq.read_table(args.corpus, columns=["id", "text"])
    ids, texts = table.column("id").to_numpy(), table.column("text").to_pylist()
    lap("read_s")
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    model = SentenceTransformer(str(args.model), device=args.device, model_kwargs={"torch_dtype": dtype})
    if json.loads((args.model / "config.json").read_text()).get("use_bidirectional_attention"):
        full_attention(model)
    lap("load_s")
    vectors = model.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)
    lap("encode_s")
    args.out.mkdir(parents=True, exist_ok=True)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
    pq.write_table(pa.table({"id": ids, "embedding": column}), args.out / "embeddings.parquet")
    lap("write_s")
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    faiss.write_index(index, str(args.out / "index.faiss"))
    lap("index_s")
    if args.default_batch_rows:
        model.encode(texts[:args.default_batch_rows], normalize_embeddings=True)  # batch_size: its default, 32
        lap("default_batch_encode_s")
    times.update(rows=len(texts), default_batch_rows=min(args.default_batch_rows, len(texts)),
                 dim=int(vectors.shape[1]), dtype=str(dtype).split(".")[1])
    (args.out / "timings.json").write_text(json.dumps(times))


if __name__ == "__main__":
    main()
