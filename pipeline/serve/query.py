"""`embedpipe query`: embed a query with an index's model and settings, search, format the hits."""
from __future__ import annotations

import json
from pathlib import Path

from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.models.model_folder import ModelFolder

from embedpipe.pipeline.batching.embed import embed_texts

from embedpipe.pipeline.text.tokenizer import TextTokenizer, make_tokenizer
from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.output.faiss_index import SearchIndex
from embedpipe.pipeline.output.layout import INDEX_META_FILE

QUERY_PROMPT_NAME = "query"
MAX_CELL_CHARS = 60
TEXT_COLUMN = "text"  # the kept column `query --rerank` reads a hit's document from


class NoTextColumn(UserError, ValueError):
    """`query --rerank` on an output whose rows kept no text column."""


class NoIndex(UserError, ValueError):
    """The folder given to --index holds no built index."""


def query_prompt_name(folder: ModelFolder, prompt: str | None, prompt_name: str | None) -> str | None:
    """The prompt name for a query: the one asked for, else the model's `query` prompt when it has one."""
    if prompt is None and prompt_name is None and QUERY_PROMPT_NAME in folder.prompts:
        return QUERY_PROMPT_NAME
    return prompt_name


def load_index(index_dir: Path, nprobe: int | None = None, ef_search: int | None = None) -> SearchIndex:
    """The index, searching with nprobe / efSearch when given (else those written into it)."""
    if not (Path(index_dir) / INDEX_META_FILE).is_file():
        raise NoIndex(f"{index_dir} holds no index (index.json); a sharded job's outputs are indexed by "
                      "`embedpipe merge OUTPUT...`")
    return SearchIndex.load(index_dir, nprobe, ef_search)


def engine_config_of(meta: dict, device: str) -> EngineConfig:
    """The engine that made the index's embeddings, from the settings recorded in index.json."""
    return EngineConfig(model=meta["model"], device=device, pooling=meta["pooling"],
                        normalize=meta["normalize"], dim=meta["dimension"], output_dtype=meta["dtype"])


def query_embedder(meta: dict, device: str, prompt: str | None = None,
                   prompt_name: str | None = None) -> tuple[Engine, TextTokenizer]:
    """The engine of an index's model and settings, and its tokenizer with the query prompt (query_prompt_name)."""
    engine = Engine(engine_config_of(meta, device))
    return engine, make_tokenizer(engine, prompt, query_prompt_name(engine.folder, prompt, prompt_name))


def search(index_dir: Path | SearchIndex, text: str, k: int, device: str, prompt: str | None,
           prompt_name: str | None, nprobe: int | None = None, ef_search: int | None = None) -> list[dict]:
    """The top-k hits of `text`, best first: {"id", "score", kept columns...} (with --chunk-tokens, the window's
    chunk, char_start and char_end first among them). index_dir: an output folder, or its loaded index."""
    index = index_dir if isinstance(index_dir, SearchIndex) else load_index(index_dir, nprobe, ef_search)
    engine, tokenizer = query_embedder(index.meta, device, prompt, prompt_name)
    vector = embed_texts(engine, tokenizer, [text])
    return index.search(vector, k)[0]


def check_text_column(index: SearchIndex) -> None:
    """Raises NoTextColumn unless the index's rows kept a text column for a reranker to read."""
    if TEXT_COLUMN not in index.ids.schema.names:
        raise NoTextColumn(f"--rerank reads each hit's text from its kept {TEXT_COLUMN!r} column, which this output "
                           f"does not have; index with --keep-columns {TEXT_COLUMN}")


def hit_texts(hits: list[dict]) -> list[str]:
    """The document each hit stands for: its kept text, or with --chunk-tokens its window of that text."""
    texts = []
    for hit in hits:
        text = hit[TEXT_COLUMN] or ""
        texts.append(text[hit["char_start"]:hit["char_end"]] if "char_start" in hit else text)
    return texts


def reranked(hits: list[dict], scores, top: int | None) -> list[dict]:
    """The hits by rerank score (scores [len(hits)], one a hit; ties: the better retrieved first), at most top, each
    with its "rerank_score" next to its retrieval "score"."""
    order = sorted(range(len(hits)), key=lambda i: -float(scores[i]))[:top]
    return [{**hits[i], "rerank_score": float(scores[i])} for i in order]


def format_hits(hits: list[dict], as_json: bool) -> str:
    """JSON, or a table: rank, (rerank score,) score, id, kept columns (long values cut, newlines shown as spaces)."""
    scores = ["rerank_score", "score"] if hits and "rerank_score" in hits[0] else ["score"]
    if as_json:
        ordered = [{"id": hit["id"], **{name: hit[name] for name in scores}, **hit} for hit in hits]
        return json.dumps(ordered, ensure_ascii=False, default=str)
    if not hits:
        return "no hits"
    names = ["id", *(name for name in hits[0] if name not in ("id", *scores))]
    rows = [["rank", *scores, *names]]
    rows += [[str(rank), *(f"{hit[name]:.4f}" for name in scores), *(_cell(hit[name]) for name in names)]
             for rank, hit in enumerate(hits, 1)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _cell(value) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS - 1] + "…"
