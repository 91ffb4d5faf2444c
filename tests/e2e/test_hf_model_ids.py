"""--model ORG/NAME[@REVISION] from the local Hugging Face cache (laid out as huggingface_hub lays it out), offline."""
import json
import subprocess
import sys

import numpy as np
import pytest

from support.numerics import cosine
from support.serve_client import ServerProcess, embed, vectors
from embedpipe.kernels.models.model_folder import builtin_models

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"


@pytest.fixture
def hub(tmp_path):
    """A hub cache holding all-MiniLM-L6-v2 at COMMIT, refs/main naming it; files linked, as the cache links blobs."""
    repo = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for path in builtin_models()["minilm"].iterdir():
        (snapshot / path.name).symlink_to(path)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return tmp_path / "hub"


def run_cli(*args, env: dict):
    import os
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def embedded(result) -> np.ndarray:
    assert result.returncode == 0, result.stderr
    return np.array([json.loads(line)["embedding"] for line in result.stdout.splitlines()])


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
def test_a_model_id_resolves_from_the_cache_by_branch_or_commit(tmp_path, hub, variable):
    env = {"HF_HUB_CACHE": str(hub)} if variable == "HF_HUB_CACHE" else {"HF_HOME": str(tmp_path)}
    want = embedded(run_cli("embed", "hello world", "--device", "cpu", env={}))
    for model in (MODEL_ID, f"{MODEL_ID}@main", f"{MODEL_ID}@{COMMIT}"):
        got = embedded(run_cli("embed", "hello world", "--model", model, "--device", "cpu", env=env))
        assert cosine(got, want).min() >= 0.99999, model


def test_a_model_id_missing_from_the_cache_is_one_line_naming_where_it_looked(tmp_path, hub):
    for model, revision in (("org/absent-model", "main"), (f"{MODEL_ID}@v9", "v9")):
        result = run_cli("embed", "x", "--model", model, "--device", "cpu", env={"HF_HUB_CACHE": str(hub)})
        assert result.returncode == 2, result.stderr
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1 and str(hub) in line and f"at revision {revision}" in line, line
        assert "never downloads models" in line


@pytest.mark.slow
def test_an_index_made_by_id_is_served_by_path(tmp_path, hub):
    """index.json records the id and the weights' fingerprint: `serve --index` takes the same weights by a path."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": [1, 2], "text": ["a cat on a mat", "stock markets"]}), tmp_path / "in" / "a.parquet")
    env = {"HF_HUB_CACHE": str(hub)}
    result = run_cli("index", tmp_path / "in", "--output", tmp_path / "out", "--model", MODEL_ID, "--device", "cpu",
                     "--quiet", env=env)
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "out" / "index.json").read_text())
    assert meta["model"] == MODEL_ID and meta["model_fingerprint"].startswith("sha256:")
    query = run_cli("query", "a cat", "--index", tmp_path / "out", "--device", "cpu", "--json", env=env)
    assert query.returncode == 0 and json.loads(query.stdout)[0]["id"] == 1, query.stderr
    server = ServerProcess(tmp_path / "server.log", "--index", str(tmp_path / "out"), "--model",
                           str(builtin_models()["minilm"]))
    try:
        assert vectors(embed(server.url, input="served")).shape == (1, 384)
    finally:
        assert server.terminate() == 0
