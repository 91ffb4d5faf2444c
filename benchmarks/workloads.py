"""Inputs of the suites: token-id sequences, texts of a known token count, a corpus of realistic lengths."""
from __future__ import annotations

from pathlib import Path

import numpy as np

CORPUS_MEDIAN_TOKENS = 64  # lengths: log-normal around this, cut to [20, 512]: most short, a long tail
CORPUS_SIGMA = 0.8
CORPUS_RANGE = (20, 512)


def vocabulary_words(folder: Path) -> tuple[object, np.ndarray]:
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_truncation()  # MiniLM's tokenizer.json cuts at 128: "512-token" texts were 130 tokens long
    words = sorted(w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) > 2)
    return tokenizer, np.array(words)  # an array: rng.choice would convert a list on every call


def texts_of_lengths(folder: Path, lengths: list[int], seed: int = 0) -> list[str]:
    """One text per length, of random whole words, that tokenises to about that many tokens
    (special tokens included for a BERT-style tokenizer)."""
    tokenizer, words = vocabulary_words(folder)
    rng = np.random.default_rng(seed)
    drafts = [" ".join(rng.choice(words, size=length).tolist()) for length in lengths]
    encodings = tokenizer.encode_batch(drafts, add_special_tokens=False)
    # room for [CLS] and [SEP]
    return tokenizer.decode_batch([e.ids[: max(1, length - 2)] for e, length in zip(encodings, lengths)])


def texts_of(folder: Path, num_texts: int, num_tokens: int, seed: int = 0) -> list[str]:
    return texts_of_lengths(folder, [num_tokens] * num_texts, seed)


def corpus_lengths(num_rows: int, seed: int = 0) -> list[int]:
    """Token lengths of a corpus: log-normal (median 64), cut to [20, 512]."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(np.log(CORPUS_MEDIAN_TOKENS), CORPUS_SIGMA, size=num_rows)
    return np.clip(raw.round(), *CORPUS_RANGE).astype(int).tolist()


def write_corpus(texts: list[str], path: Path, row_group_size: int = 4096) -> Path:
    """An (id, text) Parquet file; a unit of `embedpipe index` is whole row groups."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": np.arange(len(texts), dtype=np.int64), "text": texts}), path,
                   row_group_size=row_group_size)
    return path
