"""The same input and settings give the same embeddings: bit for bit across runs and tokenizer-worker
counts (the batches are the same), and to cosine 0.99999 across batch budgets (other batches).
Rows are compared as the unit files hold them, in order: reads of 7 rows make several tokenizer
chunks per unit, whose order must not depend on which worker finishes first."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.numerics import cosine
from support.corpus import variant_texts, vectors_of, write_corpus
from embedpipe.cli.main import app


def read_unit_files(output) -> pa.Table:
    """Every unit file's rows, file by file (by name), each in its own order."""
    return pa.concat_tables(pq.read_table(path) for path in sorted((output / "embeddings").glob("*.parquet")))


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model):
    """run(workers, max_batch_tokens) -> the output's rows, unit file by unit file."""
    folder = tmp_path_factory.mktemp("determinism")
    write_corpus(folder / "in", variant_texts(150), num_files=3, row_group_size=25)
    runs = iter(range(100))

    def index(workers: int, max_batch_tokens: int):
        output = folder / f"out{next(runs)}"
        options = ["--model", tiny_model, "--device", "cpu", "--quiet", "--rows-per-unit", 25, "--workers", workers,
                   "--max-batch-tokens", max_batch_tokens, "--read-rows", 7]
        result = CliRunner().invoke(app, ["index", str(folder / "in"), "--output", str(output), *map(str, options)])
        assert result.exit_code == 0, result.output
        return read_unit_files(output)
    return index


@pytest.fixture(scope="module")
def first(run):
    return run(0, 4096)


def test_two_runs_and_any_worker_count_give_the_same_bits(run, first):
    for workers in (0, 2):
        again = run(workers, 4096)
        assert again.column("id").equals(first.column("id"))
        assert vectors_of(again).tobytes() == vectors_of(first).tobytes()


def test_other_batch_budgets_give_the_same_vectors_to_float_rounding(run, first):
    for workers, max_batch_tokens in ((0, 512), (1, 16384)):
        other = run(workers, max_batch_tokens)
        assert other.column("id").equals(first.column("id"))
        assert cosine(vectors_of(other), vectors_of(first)).min() >= 0.99999
