"""Model ids (ORG/NAME or ORG/NAME@REVISION) found in the local Hugging Face hub cache.

Read as huggingface_hub lays the cache out, without it and without the network:
{cache}/models--ORG--NAME/refs/REVISION holds a commit hash, snapshots/COMMIT/ the model's files.
The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
~/.cache/huggingface/hub, as huggingface_hub and sentence-transformers with HF_HUB_OFFLINE=1 find it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

HUB_ID = re.compile(r"([\w.-]+)/([\w.-]+)(?:@([\w.-]+))?")


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface" / "hub"


def is_hub_id(name: str) -> bool:
    return HUB_ID.fullmatch(name) is not None


def hub_snapshot(name: str) -> Path | str:
    """The snapshot folder of a model id in the cache, or why it is not there (a message)."""
    org, model, revision = HUB_ID.fullmatch(name).groups()
    revision = revision or "main"
    cache = hub_cache()
    repo = cache / f"models--{org}--{model}"
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision  # a branch or tag, else a commit hash
    snapshot = repo / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        return (f"model {name!r} is not in the Hugging Face cache {cache} (no {repo.name} at revision {revision}); "
                f"embedpipe never downloads models: fetch it once (huggingface-cli download {org}/{model}), set "
                "HF_HUB_CACHE or HF_HOME to the cache that has it, or pass a local folder")
    return snapshot
