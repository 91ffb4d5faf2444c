"""What the CLI and Python users call: the jobs, with the engines each one's settings ask for.

The index job itself (index/job.py) embeds with whatever engines it is handed; here they are picked:
this process's engine, one engine process per device (--devices, scale/devices.py) or a Ray
cluster (--ray, scale/ray_job.py). Only cli/ and users import this module.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from embedpipe.kernels.batch import BucketPolicy, pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.models.model_folder import ModelLoadError
from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.batching.embed import embed_token_ids, embed_texts, embed_windows
from embedpipe.pipeline.batching.rerank import Scored, score_documents
from embedpipe.pipeline.config import ConfigError, IndexOptions, JobConfig, job_config
from embedpipe.pipeline.serve.query import check_text_column, hit_texts, load_index, query_embedder, reranked, search
from embedpipe.pipeline.text.chunking import ChunkConfig
from embedpipe.pipeline.text.late_chunking import chunker_of
from embedpipe.pipeline.text.pairs import make_pair_tokenizer
from embedpipe.pipeline.text.tokenizer import make_tokenizer
from embedpipe.pipeline.index import tokenize_job
from embedpipe.pipeline.index.job import JobResult, LocalEngine, OpenEmbedder, run_job
from embedpipe.pipeline.scale.devices import DeviceEngines
from embedpipe.pipeline.scale.ray_job import ray_engines, tokenize_with_ray

# (sequences, tokens each) of `warmup`: a small batch (eager, then captured and replayed) and a large one (eager)
WARMUP_SHAPES = ((2, 100), (64, 512))


def run_index(job: JobConfig) -> JobResult:
    """`embedpipe index`: the whole job, holding OUTPUT's lock (raises OutputLocked when another run holds it)."""
    return run_job(job, embedder_for(job))


def embedder_for(job: JobConfig) -> OpenEmbedder:
    if job.ray_address is not None:
        return lambda job, tokenizer: ray_engines(job)
    if job.devices is not None:
        return lambda job, tokenizer: DeviceEngines(job)
    return LocalEngine


def run_tokenize(job: JobConfig) -> JobResult:
    """`embedpipe tokenize`: in this process's tokenizer pool, or as Ray tasks (--ray)."""
    return tokenize_job.run_tokenize(job, tokenize_with_ray if job.ray_address is not None else None)


def index_with_ray(inputs: list[str], output: str, address: str = "auto", **options) -> JobResult:
    """The job of `embedpipe index INPUTS --output OUTPUT --ray ADDRESS`, other options by their
    IndexOptions names (devices="gpu:4", keep_columns=("title",), ...). In a process that has already
    called ray.init, that session is used and `address` is ignored."""
    return run_index(job_config(IndexOptions(inputs=tuple(map(str, inputs)), output=str(output), ray=address,
                                             **options)))


def run_warmup(config: EngineConfig) -> dict[str, float | int | str]:
    """`embedpipe warmup`: on CUDA with attention "auto", first times the attention backends on the model's shape
    and stores the fastest per batch size (Engine.measure_attention); then compiles the model's kernels
    (FlashInfer JIT, Triton, cuBLAS) by running each warm-up shape three times: eager, capture, replay.
    Returns seconds per phase, the attention timings and choice, and the graph counters."""
    start = time.perf_counter()
    engine = Engine(config)
    timings: dict[str, float | int | str] = {"load_s": time.perf_counter() - start}
    if config.attention == "auto":
        timings |= engine.measure_attention()
        if any(name.startswith("attention_") for name in timings):
            engine = Engine(config)  # built again, with the choice just stored
    timings["attention"] = engine.attention
    max_len = min(engine.folder.max_seq_length, 512)
    for num_seqs, length in WARMUP_SHAPES:
        batch = pack([[100 + i % 1000 for i in range(min(length, max_len))]] * num_seqs, BucketPolicy())
        for phase in ("first", "second", "third"):
            start = time.perf_counter()
            engine.step(batch).result()
            timings[f"{num_seqs}x{length}_{phase}_s"] = time.perf_counter() - start
    timings.update(engine.counters.as_dict())
    return timings


# ---- the Python API (embedpipe/__init__.py, pipeline/public/) ----

class TextEmbedder:
    """embedpipe.Embedder's engine and tokenizer; settings it cannot take raise ConfigError (a UserError)."""

    def __init__(self, model: str, device: str, dim: int | None, dtype: str, prompt: str | None,
                 prompt_name: str | None, max_length: int | None, batch_tokens: int | None):
        try:
            self.engine = Engine(EngineConfig(model=model, device=device, dim=dim, output_dtype=dtype))
            self.tokenizer = make_tokenizer(self.engine, prompt, prompt_name, max_length)
            self.batching = _batching(batch_tokens)
        except (ModelLoadError, ValueError, RuntimeError) as error:  # RuntimeError: a malformed device name
            raise ConfigError(str(error)) from error

    def encode(self, inputs, batch_tokens: int | None = None) -> np.ndarray:
        batching = self.batching if batch_tokens is None else _batching(batch_tokens)
        if isinstance(inputs, str):
            inputs = [inputs]
        inputs = list(inputs)
        if not inputs:
            return np.empty((0, self.engine.output.width), dtype=self.engine.output.numpy_dtype)
        if all(isinstance(item, str) for item in inputs):
            ids, _ = self.tokenizer.encode(inputs)
        elif all(not isinstance(item, str) and len(item) for item in inputs):
            ids = [list(map(int, item)) for item in inputs]
        else:
            raise ConfigError("inputs must be texts or non-empty token-id lists, not a mix")
        return embed_token_ids(self.engine, ids, batching)

    def encode_windows(self, texts, chunk_tokens: int, chunk_overlap: int = 0, chunk_on: str = "token",
                       late_chunking: bool = False, batch_tokens: int | None = None) -> EmbeddedWindows:
        """The texts cut into windows (`embed --chunk-tokens`), each embedded; or with late_chunking, each pooled
        from one pass over its whole text (`--late-chunking`)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not all(isinstance(text, str) for text in texts):
            raise ConfigError("encode_windows takes texts, not token ids")
        try:
            cutter = chunker_of(self.tokenizer, ChunkConfig(chunk_tokens, chunk_overlap, chunk_on, late_chunking))
            if late_chunking:
                self.engine.output.check_span_pooling()
        except ValueError as error:
            raise ConfigError(str(error)) from error
        batching = self.batching if batch_tokens is None else _batching(batch_tokens)
        vectors, cut = embed_windows(self.engine, cutter, texts, batching)
        return EmbeddedWindows(vectors, cut.rows, cut.chunk, cut.char_start, cut.char_end, cut.texts)


@dataclasses.dataclass(frozen=True)
class EmbeddedWindows:
    """Embedder.encode_windows' result: window w is texts[text_index[w]][char_start[w]:char_end[w]] (its text:
    texts[w]), that text's chunk[w]-th window. vectors [W, width]; text_index, char_start, char_end [W] int64;
    chunk [W] int32."""

    vectors: np.ndarray
    text_index: np.ndarray
    chunk: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray
    texts: list[str]

    def __len__(self) -> int:
        return len(self.vectors)


def _batching(batch_tokens: int | None) -> BatcherConfig:
    if batch_tokens is None:
        return BatcherConfig()
    try:
        return BatcherConfig(max_batch_tokens=batch_tokens)
    except ValueError as error:
        raise ConfigError(f"batch_tokens: {error}") from error


def index_job(inputs: list, output, options: dict) -> JobResult:
    """embedpipe.index(): IndexOptions by name (quiet unless asked), the job picked as `embedpipe index` does."""
    names = {f.name for f in dataclasses.fields(IndexOptions)} - {"inputs", "output"}
    unknown = sorted(set(options) - names)
    if unknown:
        raise ConfigError(f"index() has no option {unknown[0]!r}; its options: {', '.join(sorted(names))}")
    options = {"quiet": True, **options}
    if isinstance(options.get("keep_columns"), str):
        options["keep_columns"] = (options["keep_columns"],)
    return run_index(job_config(IndexOptions(inputs=tuple(map(str, inputs)), output=str(output), **options)))


class IndexSearch:
    """embedpipe.SearchIndex: the FAISS index of an output folder, and the engine of its model once a text query
    needs it."""

    def __init__(self, output: Path, device: str, nprobe: int | None, ef_search: int | None):
        self.index = load_index(output, nprobe, ef_search)
        self.device = device
        self._embedder: tuple[Engine, object] | None = None

    def search(self, queries, k: int) -> list[list[dict]]:
        if isinstance(queries, str):
            queries = [queries]
        if isinstance(queries, np.ndarray):
            vectors = self._index_form(queries)
        else:
            engine, tokenizer = self._text_embedder()
            vectors = embed_texts(engine, tokenizer, list(queries))
        return self.index.search(vectors, k)

    def _text_embedder(self):
        if self._embedder is None:
            try:
                self._embedder = query_embedder(self.index.meta, self.device)
            except (ModelLoadError, ValueError) as error:
                raise ConfigError(str(error)) from error
        return self._embedder

    def _index_form(self, vectors: np.ndarray) -> np.ndarray:
        """[q, dim] float32 -> the index's dtype (quantised as the Pooler stores its vectors)."""
        meta, dtype = self.index.meta, output_dtype(self.index.meta["dtype"])
        if vectors.ndim != 2:
            raise ConfigError(f"query vectors must be [q, dim], not of shape {vectors.shape}")
        if np.issubdtype(vectors.dtype, np.floating) and not dtype.is_float:
            vectors = dtype.quantise(vectors.astype(np.float32))
        if vectors.shape[1] != dtype.width(meta["dimension"]):
            raise ConfigError(f"query vectors have {vectors.shape[1]} columns; the index's {meta['dtype']} vectors "
                              f"have {dtype.width(meta['dimension'])}")
        return vectors


class TextReranker:
    """embedpipe.Reranker's engine (task "score") and pair tokenizer; settings it cannot take raise ConfigError."""

    def __init__(self, model: str, device: str, max_length: int | None, batch_tokens: int | None,
                 instruction: str | None):
        try:
            self.engine = Engine(EngineConfig(model=model, device=device, task="score"))
            self.tokenizer = make_pair_tokenizer(self.engine, max_length, instruction)
            self.batching = _batching(batch_tokens)
        except (ModelLoadError, ValueError, RuntimeError) as error:  # RuntimeError: a malformed device name
            raise ConfigError(str(error)) from error

    def score(self, query: str, documents, truncate: bool = True) -> Scored:
        if not isinstance(query, str) or isinstance(documents, str) or \
                not all(isinstance(document, str) for document in documents):
            raise ConfigError("rerank takes a query text and a list of document texts")
        return score_documents(self.engine, self.tokenizer, query, list(documents), self.batching, truncate)


def search_reranked(index_dir: Path, text: str, k: int, top: int | None, rerank_model: str, device: str,
                    prompt: str | None = None, prompt_name: str | None = None, nprobe: int | None = None,
                    ef_search: int | None = None) -> list[dict]:
    """`query --rerank`: the top-k hits of `text` retrieved from the index, rescored by the reranker against `text`
    (each hit's document: its kept text column) and ordered by that score: at most `top` hits, each with
    "rerank_score" besides its retrieval "score". Raises NoTextColumn (a UserError) before any model loads when the
    output kept no text column."""
    index = load_index(index_dir, nprobe, ef_search)
    check_text_column(index)
    reranker = TextReranker(rerank_model, device, None, None, None)
    hits = search(index, text, k, device, prompt, prompt_name)
    if not hits:
        return []
    return reranked(hits, reranker.score(text, hit_texts(hits)).scores, top)
