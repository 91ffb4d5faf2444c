"""The README's recipes for reading an output elsewhere (DuckDB, Polars, Qdrant local mode), run as written on an
output of examples/sample.parquet: each gives `embedpipe query`'s top 5."""
import re
import shutil

import pytest

import embedpipe
from support.paths import REPO

RECIPES = dict(re.findall(r"<!-- recipe: (\w+) -->\n```python\n(.*?)```", (REPO / "README.md").read_text(), re.S))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipes")
    shutil.copy(REPO / "examples" / "sample.parquet", folder / "sample.parquet")
    embedpipe.index([folder / "sample.parquet"], folder / "out", device="cpu")
    return folder


def test_the_readme_has_the_three_recipes():
    assert sorted(RECIPES) == ["duckdb", "polars", "qdrant"]


@pytest.mark.parametrize("name", ["duckdb", "polars", "qdrant"])
def test_a_recipe_gives_the_top_5_of_embedpipe_query(workdir, monkeypatch, name):
    pytest.importorskip({"qdrant": "qdrant_client"}.get(name, name))
    monkeypatch.chdir(workdir)
    namespace: dict = {}
    exec(compile(RECIPES[name], f"README recipe {name}", "exec"), namespace)
    want = embedpipe.open_index(workdir / "out", device="cpu").search("how do I reset my password?", k=5)[0]
    got = namespace["hits"]
    assert [hit_id for hit_id, _ in got] == [hit["id"] for hit in want], (got, want)
    assert [round(score, 4) for _, score in got] == [round(hit["score"], 4) for hit in want]
