"""What each CLI command does, given its configs. Errors a user can fix exit with a message, not a traceback."""
from __future__ import annotations

import json
import sys

from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.model_folder import ModelLoadError

from .embed import embed_texts, make_tokenizer


def fail(message: str, code: int = 2):
    print(f"embedpipe: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def run_embed(config: EngineConfig, texts: list[str], prompt: str | None, prompt_name: str | None) -> None:
    try:
        engine = Engine(config)
        tokenizer = make_tokenizer(engine, prompt, prompt_name)
    except (ModelLoadError, ValueError) as e:
        fail(str(e))
    vectors = embed_texts(engine, tokenizer, texts)
    for text, vector in zip(texts, vectors):
        print(json.dumps({"text": text, "embedding": vector.tolist()}, ensure_ascii=False))
