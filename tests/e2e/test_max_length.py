"""--max-length N caps the tokens per text below the model's max_seq_length, on embed, index and the Python API."""
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import embedpipe
from support.corpus import read_embeddings, vectors_of
from support.numerics import cosine

TEXTS = ["one two three four five six seven eight nine ten eleven twelve", "short", "a b c d e f g h i j k l m n"]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def embedded(result) -> np.ndarray:
    assert result.returncode == 0, result.stderr
    return np.array([json.loads(line)["embedding"] for line in result.stdout.splitlines()])


def test_embed_max_length_equals_sentence_transformers_at_that_length():
    from sentence_transformers import SentenceTransformer
    from embedpipe.kernels.models.model_folder import builtin_models
    reference = SentenceTransformer(str(builtin_models()["minilm"]), device="cpu")
    reference.max_seq_length = 8
    cli = embedded(run_cli("embed", *TEXTS, "--max-length", "8", "--device", "cpu"))
    assert cosine(cli, reference.encode(TEXTS)).min() >= 0.9999
    assert cosine(cli, embedded(run_cli("embed", *TEXTS, "--device", "cpu")))[0] < 0.99  # it did cut
    api = embedpipe.Embedder(device="cpu", max_length=8).encode(TEXTS)
    assert cosine(api, cli).min() >= 0.99999


def test_index_max_length_is_a_setting_of_the_job(tmp_path):
    pq.write_table(pa.table({"id": [0, 1, 2], "text": TEXTS}), tmp_path / "a.parquet")
    result = run_cli("index", tmp_path / "a.parquet", "--output", tmp_path / "out", "--device", "cpu", "--quiet",
                     "--max-length", "8")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "out" / "job.json").read_text())["max_seq_length"] == 8
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["truncated_texts"] == 2
    stored = vectors_of(read_embeddings(tmp_path / "out"))
    assert cosine(stored, embedded(run_cli("embed", *TEXTS, "--max-length", "8", "--device", "cpu"))).min() >= 0.9999
    again = run_cli("index", tmp_path / "a.parquet", "--output", tmp_path / "out", "--device", "cpu", "--quiet")
    assert again.returncode == 2 and "max_seq_length: 8 (stored) != 256 (now)" in again.stderr  # not mixed


@pytest.mark.parametrize("value", ["0", "257"])
def test_a_max_length_outside_the_model_is_a_one_line_usage_error(tmp_path, value):
    for args in (["embed", "x"], ["index", tmp_path, "--output", tmp_path / "out"]):
        result = run_cli(*args, "--max-length", value, "--device", "cpu")
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == ("embedpipe: error: max-length must be from 1 to the model's max_seq_length "
                                         f"256, not {value}")
