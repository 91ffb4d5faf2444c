"""`import embedpipe`: the Python API against the command line on the same inputs."""
import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import embedpipe
from support.corpus import assert_same_output, read_embeddings, variant_texts, vectors_of
from support.numerics import cosine
from support.paths import REPO

TEXTS = ["hello world", "Ein kurzer Satz.", "ragged batches of token ids", "x " * 400]  # the last is cut


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def model():
    return embedpipe.Embedder(device="cpu")


def test_importing_embedpipe_loads_no_torch_and_names_its_version():
    from importlib.metadata import version
    code = "import sys, embedpipe; print(embedpipe.__version__, 'torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == [version("embedpipe"), "False"], result.stderr
    assert {"Embedder", "index", "open_index", "SearchIndex", "UserError", "JobFault",
            "OutputLocked"} <= set(embedpipe.__all__)
    assert "embedpipe.Embedder()" in embedpipe.__doc__ and "[len(inputs), width]" in embedpipe.Embedder.encode.__doc__


def test_encode_gives_the_vectors_of_embed(model):
    result = run_cli("embed", *TEXTS, "--device", "cpu")
    assert result.returncode == 0, result.stderr
    cli = np.array([json.loads(line)["embedding"] for line in result.stdout.splitlines()])
    ours = model.encode(TEXTS)
    assert ours.shape == (4, 384) and ours.dtype == np.float32 and model.dim == 384 and model.device == "cpu"
    assert cosine(ours, cli).min() >= 0.99999
    assert cosine(model.encode(TEXTS[0]), cli[:1]).min() >= 0.99999  # one string: one row
    assert cosine(model.encode(TEXTS, batch_tokens=256), ours).min() >= 0.99999  # batching changes nothing
    ids = model._embedder.tokenizer.encode(TEXTS)[0]
    assert cosine(model.encode(ids), ours).min() >= 0.99999  # token-id lists
    assert model.encode([]).shape == (0, 384)


def test_encode_dim_and_dtype_as_embed():
    int8 = embedpipe.Embedder(device="cpu", dim=64, dtype="int8")
    result = run_cli("embed", TEXTS[0], "--device", "cpu", "--dim", "64", "--dtype", "int8")
    vector = int8.encode([TEXTS[0]])
    assert vector.dtype == np.int8 and vector.shape == (1, 64)
    assert np.abs(vector.astype(int) - np.array(json.loads(result.stdout)["embedding"])).max() <= 1


@pytest.mark.parametrize("make, message", [
    (lambda: embedpipe.Embedder("/no/such/model", device="cpu"), "is neither a local folder, a short name"),
    (lambda: embedpipe.Embedder(device="tpu"), "tpu"),
    (lambda: embedpipe.Embedder(device="cpu", dim=0), "dim must be positive"),
    (lambda: embedpipe.index(["in"], "out", bogus=1), "index() has no option 'bogus'"),
    (lambda: embedpipe.open_index("/no/such/out"), "holds no index"),
])
def test_errors_are_typed_user_errors(make, message):
    with pytest.raises(embedpipe.UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_mixed_inputs_are_refused(model):
    with pytest.raises(embedpipe.UserError, match="not a mix"):
        model.encode(["text", [101, 102]])


def test_index_writes_what_the_cli_writes_and_open_index_searches_it(tmp_path, model):
    rows = variant_texts(300)
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": list(range(300)), "text": rows, "title": [f"t{i}" for i in range(300)]}),
                   tmp_path / "in" / "docs.parquet", row_group_size=100)
    cli = run_cli("index", tmp_path / "in", "--output", tmp_path / "cli", "--device", "cpu", "--keep-columns",
                  "title", "--rows-per-unit", "100", "--quiet")
    assert cli.returncode == 0, cli.stderr
    result = embedpipe.index(tmp_path / "in", tmp_path / "api", device="cpu", keep_columns="title", rows_per_unit=100)
    assert result.exit_code == 0 and result.metrics["rows"] == 300
    assert_same_output(tmp_path / "api", tmp_path / "cli")
    again = embedpipe.index([tmp_path / "in"], tmp_path / "api", device="cpu", keep_columns="title", rows_per_unit=100)
    assert again.metrics["rows"] == 0 and again.metrics["output_rows"] == 300  # a resume: nothing left to do
    index = embedpipe.open_index(tmp_path / "api", device="cpu")
    assert index.meta["num_rows"] == 300
    query = run_cli("query", rows[7], "--index", tmp_path / "api", "--device", "cpu", "-k", "3", "--json")
    assert query.returncode == 0, query.stderr
    by_text = index.search(rows[7], k=3)[0]
    assert [hit["id"] for hit in by_text] == [hit["id"] for hit in json.loads(query.stdout)] and by_text[0]["id"] == 7
    assert by_text[0]["title"] == "t7"
    stored = vectors_of(read_embeddings(tmp_path / "api"))
    by_vector = index.search(stored[[7, 8]], k=1)
    assert [hits[0]["id"] for hits in by_vector] == [7, 8]


def test_the_readme_shows_the_api():
    readme = (REPO / "README.md").read_text()
    assert "embedpipe.Embedder(" in readme and "embedpipe.open_index(" in readme


def test_index_raises_output_locked_while_another_run_holds_the_output(tmp_path):
    from embedpipe.pipeline.output.lock import output_lock
    pq.write_table(pa.table({"id": [1], "text": ["one"]}), tmp_path / "a.parquet")
    (tmp_path / "out").mkdir()
    with output_lock(tmp_path / "out"), pytest.raises(embedpipe.OutputLocked):
        embedpipe.index(tmp_path / "a.parquet", tmp_path / "out", device="cpu")
