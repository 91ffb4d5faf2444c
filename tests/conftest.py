import json
import os
import sys
from pathlib import Path

from support.paths import DATA, REPO  # tests/ is on sys.path (pyproject's pythonpath) before this file loads

# The repository's root holds kernels/, the source of embedpipe.kernels. On sys.path (`python -m pytest` puts the
# working directory there) it shadows the `kernels` distribution that transformers imports (5.25 on), and every
# test that loads transformers fails. The tests import embedpipe from its installed package and their helpers from
# tests/ (pyproject's pythonpath), so the root comes off, before anything imports transformers.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != REPO]

import pytest  # noqa: E402
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the fused Triton ops run on the CPU interpreter


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def texts() -> list[str]:
    """240 real, varied texts: short, truncated, non-Latin scripts, emoji, whitespace, code."""
    return [json.loads(line)["text"] for line in (DATA / "texts.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def minilm():
    from embedpipe.kernels.engine import Engine, EngineConfig
    return Engine(EngineConfig(model="minilm", device="cpu"))


@pytest.fixture(scope="session")
def minilm_reference():
    """sentence-transformers all-MiniLM-L6-v2 in float32 on the CPU."""
    from sentence_transformers import SentenceTransformer
    from embedpipe.kernels.models.model_folder import builtin_models
    return SentenceTransformer(str(builtin_models()["minilm"]), device="cpu")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A random-weight 2-layer BERT folder (hidden 64, mean pooling, normalised): fast on the CPU."""
    from embedpipe.kernels.testing.random_model import write_random_model
    folder = tmp_path_factory.mktemp("tiny-bert")
    write_random_model("tiny-bert", folder)
    return folder
