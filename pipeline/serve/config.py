"""`embedpipe serve`'s settings (ServeConfig) and what the HTTP side knows of the model it serves (ServedModel).

No Starlette or uvicorn here: the CLI checks its options before the server extra is imported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from embedpipe.kernels.engine import EngineConfig
from embedpipe.kernels.models.model_folder import ModelFolder
from embedpipe.kernels.pooling import OutputSpec
from embedpipe.pipeline.batching.batcher import BatcherConfig
from embedpipe.pipeline.serve.scheduler import MAX_IN_FLIGHT

# the default --max-body-bytes: max_inputs texts of max_input_tokens tokens at this many bytes each (English
# takes ~5, JSON-escaped CJK ~9), between 1 MiB and 64 MiB
BODY_BYTES_PER_TOKEN = 16


@dataclass(frozen=True)
class ServeConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    index: Path | None = None  # an index folder (index.faiss, index.json, index_ids.parquet)
    nprobe: int | None = None  # the index's search parameters; None: those written into it
    ef_search: int | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    max_inputs: int = 2048  # inputs per request (OpenAI's limit)
    max_input_tokens: int | None = None  # None: the model's max_seq_length
    truncate: bool = True  # default for requests that do not say: cut long inputs, or reject them
    max_queue: int = 512  # requests admitted and not yet answered; more get 429
    request_timeout: float = 30.0  # seconds from arrival; then 504
    batching: BatcherConfig = field(default_factory=BatcherConfig)
    tokenizer_threads: int = 4  # per HTTP process
    http_workers: int = 1  # HTTP processes; 1: the HTTP server runs in the engine process
    max_in_flight: int = MAX_IN_FLIGHT  # engine batches queued on the device at once
    # microseconds the engine thread polls for requests after its last batch before it sleeps; None: spin_seconds()'s
    idle_spin_us: int | None = None
    max_body_bytes: int | None = None  # larger request bodies get 413; None: default_max_body_bytes
    # every route but GET /health wants `Authorization: Bearer <api_key>`; None: open. Kept out of the repr
    api_key: str | None = field(default=None, repr=False)
    served_model_names: tuple[str, ...] = ()  # names the model answers to besides its own; the first is echoed
    # a reranker's engine (task "score") next to the embedding one, for POST /v1/rerank; None: no reranker
    rerank: EngineConfig | None = None

    def __post_init__(self):
        for name in ("max_inputs", "max_queue", "tokenizer_threads", "http_workers", "max_in_flight"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.idle_spin_us is not None and self.idle_spin_us < 0:
            raise ValueError(f"idle_spin_us must be 0 or more, not {self.idle_spin_us}")
        if not 0 <= self.port <= 65535:  # a larger one listened on port % 65536 while announcing this one
            raise ValueError(f"port must be between 0 and 65535, not {self.port}")
        if self.max_input_tokens is not None and self.max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be at least 1, not {self.max_input_tokens}")
        if self.max_body_bytes is not None and self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, not {self.max_body_bytes}")
        if self.request_timeout <= 0:
            raise ValueError(f"request_timeout must be positive, not {self.request_timeout}")
        if self.engine.output_dtype != "float32":
            raise ValueError("the server returns float32 embeddings; leave the engine's output dtype at float32")
        if self.api_key is not None and not _is_token(self.api_key):  # a key a client could never send
            raise ValueError("the API key (--api-key or EMBEDPIPE_API_KEY) must be a non-empty string of printable "
                             "ASCII without spaces")
        if not all(self.served_model_names):
            raise ValueError("a served model name (--served-model-name) must not be empty")
        if self.rerank is not None and self.rerank.task != "score":
            raise ValueError("the reranker's engine must be of task \"score\"")


IDLE_SPIN_US = 1000  # the default with HTTP processes on a GPU


def spin_seconds(config: ServeConfig, device: str) -> float:
    """How long the engine thread polls after its last batch: idle_spin_us, or by default 1 ms when HTTP processes
    feed a GPU engine (its thread is alone on the request path; a request then starts without a wake-up) and none
    otherwise (in one process it would take the GIL from the HTTP loop; on a CPU, a core from the engine)."""
    if config.idle_spin_us is not None:
        return config.idle_spin_us / 1e6
    return IDLE_SPIN_US / 1e6 if config.http_workers > 1 and device.startswith("cuda") else 0.0


def _is_token(key: str) -> bool:
    return bool(key) and key.isascii() and key.isprintable() and " " not in key


@dataclass(frozen=True)
class ServedModel:
    """What the HTTP side knows of the engine and the index (picklable: HTTP processes get a copy)."""

    name: str  # the model's own (--model)
    folder: ModelFolder
    output: OutputSpec
    index_meta: dict | None  # None: no index
    names: tuple[str, ...]  # every name requests may ask for: --served-model-name's, then the model's own
    dtype: str  # the engine's weights and activations: "float32", "bfloat16", ...
    reranker: ServedReranker | None = None  # None: no reranker (/v1/rerank answers 404)

    @classmethod
    def of(cls, config: ServeConfig, engine, index=None, reranker=None) -> ServedModel:
        """reranker: the reranker's Engine (task "score"), when the server has one."""
        names = tuple(dict.fromkeys((*config.served_model_names, config.engine.model)))
        served_reranker = None if reranker is None else ServedReranker(config.rerank.model, reranker.folder)
        return cls(config.engine.model, engine.folder, engine.output, None if index is None else index.meta, names,
                   str(engine.dtype).removeprefix("torch."), served_reranker)


@dataclass(frozen=True)
class ServedReranker:
    """What the HTTP side knows of the reranker (--rerank-model): the name requests give as `model`, and its folder
    (the pair tokenizer is made from it: text/pairs.make_pair_tokenizer)."""

    name: str
    folder: ModelFolder


def default_max_body_bytes(max_inputs: int, max_input_tokens: int) -> int:
    return min(max(max_inputs * max_input_tokens * BODY_BYTES_PER_TOKEN, 1 << 20), 64 << 20)
