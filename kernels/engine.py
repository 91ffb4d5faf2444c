"""The engine: a model, an attention backend and a pooler (or a reranker's score head) behind
`step(batch) -> LazyTensor`."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from embedpipe.kernels.attention import TorchRaggedAttention
from embedpipe.kernels.attention_choice import single_choice
from embedpipe.kernels.batch import Batch, BucketPolicy, pack
from embedpipe.kernels.graph_cache import GraphConfig, GraphCounters
from embedpipe.kernels.lazy_tensor import LazyTensor
from embedpipe.kernels.models.loader import attention_spec, load_model
from embedpipe.kernels.models.model_folder import TASKS, ModelFolder, read_model_folder
from embedpipe.kernels.ops import make_ops
from embedpipe.kernels.output_dtypes import output_dtype
from embedpipe.kernels.pooling import OutputSpec, Pooler, ScoreHead

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ATTENTION_BACKENDS = ("auto", "flashinfer", "fa2", "fa3", "torch-varlen", "triton", "torch")


@dataclass(frozen=True)
class EngineConfig:
    model: str = "minilm"  # short name or local folder
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:N"
    dtype: str | None = None  # weights and activations; None: bfloat16 on CUDA, float32 on CPU
    pooling: str | None = None  # None: from the model's sentence-transformers config
    normalize: bool | None = None  # None: from the model (a Normalize module)
    dim: int | None = None  # Matryoshka truncation; None: the full hidden size
    output_dtype: str = "float32"  # float32 | float16 | int8 | binary
    attention: str = "auto"  # CUDA attention backend (the CPU always runs exact per-sequence SDPA)
    graphs: GraphConfig = field(default_factory=GraphConfig)
    # How the host waits for a batch on CUDA: spinning (the lowest latency, one core kept busy) or
    # sleeping until the device signals (the index job: that core goes to its tokenizer workers)
    spin_wait: bool = True
    # Batches launched and not yet read (batching/in_flight.py): the CUDA runner keeps a pinned slot for each,
    # and one more. The index job's 3: with MiniLM's ~1.6 ms batches, 2 left the H200 idle whenever the feeding
    # thread took longer than one batch between two steps (receiving a chunk, a slow wake-up)
    max_in_flight: int = 3
    # "embed": a pooled vector a sequence; "score": a reranker's relevance score a sequence (output [num_seqs, 1]
    # float32; pooling, normalize, dim and output_dtype do not apply)
    task: str = "embed"

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if self.task == "score" and (self.pooling, self.normalize, self.dim, self.output_dtype) != (None, None, None,
                                                                                                   "float32"):
            raise ValueError("a reranker outputs one float32 score a sequence: pooling, normalize, dim and "
                             "output_dtype do not apply")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        output_dtype(self.output_dtype)  # raises for an unknown name
        if self.dim is not None and self.dim <= 0:
            raise ValueError(f"dim must be positive, not {self.dim}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {self.max_in_flight}")
        if self.attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_BACKENDS)}, not {self.attention!r}")

    @property
    def device_type(self) -> str:
        """"cpu" or "cuda" as configured, whether or not this machine has the device (a config is checked
        where it is written; its engine, where it runs); raises RuntimeError for a malformed device."""
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return torch.device(self.device).type

    def torch_device(self) -> torch.device:
        """Raises ValueError for a CUDA device this machine does not have (before any model is loaded)."""
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device = torch.device(self.device)
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise ValueError(f"device {self.device!r}: this machine has no CUDA GPU that torch can use "
                                 "(use --device cpu or auto)")
            if device.index is not None and device.index >= count:
                raise ValueError(f"device {self.device!r}: this machine has {count} CUDA GPU(s), cuda:0 to "
                                 f"cuda:{count - 1}")
        return device

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        if self.dtype is not None:
            return DTYPES[self.dtype]
        return torch.bfloat16 if device.type == "cuda" else torch.float32


@dataclass(frozen=True)
class ModelSpec:
    """What an engine of a config outputs, read from the model folder without loading weights."""

    folder: ModelFolder
    output: OutputSpec  # a reranker's: width 1, float32, pooled on the token its head scores


def model_spec(config: EngineConfig) -> ModelSpec:
    """Raises ModelLoadError for a bad folder, ValueError for a setting the model cannot take (dim)."""
    if config.task == "score":
        folder = read_model_folder(config.model, task="score")
        return ModelSpec(folder, OutputSpec(folder.pooling, False, 1, "float32"))
    folder = read_model_folder(config.model, config.pooling)
    hidden = folder.hidden_size
    if config.dim is not None and config.dim > hidden:
        raise ValueError(f"dim {config.dim} is larger than the model's hidden size {hidden}")
    normalize = folder.normalize if config.normalize is None else config.normalize
    return ModelSpec(folder, OutputSpec(folder.pooling, normalize, config.dim or hidden, config.output_dtype))


class Engine:
    """Runs packed batches through the model: `step(batch)` returns a LazyTensor at once."""

    def __init__(self, config: EngineConfig = EngineConfig()):
        self.config = config
        self.spec = model_spec(config)
        self.folder, self.output = self.spec.folder, self.spec.output
        self.device = config.torch_device()
        if self.device.type == "cuda" and self.device.index is not None:
            # graphs, events, Triton launches and the pool use the current device: make it this one
            torch.cuda.set_device(self.device)
        self.dtype = config.torch_dtype(self.device)
        self.attn = self._attention()
        self.ops = make_ops(self.device)  # chosen once, shared by the engine, the model and the pooler
        self.model = load_model(self.folder, self.attn, self.ops, self.device, self.dtype)
        self.pooler = self._output_head()
        self.runner = None
        self.warm_up_s: float | None = None
        if self.device.type == "cuda":
            from embedpipe.kernels.cuda.runner import CudaRunner
            self.runner = CudaRunner(self.forward, self.forward_spans, self.attn, self.device, config.graphs,
                                     self.output.torch_dtype, self.output.width, config.spin_wait,
                                     config.max_in_flight, self.folder.takes_token_types)

    def _output_head(self):
        """The Pooler of an embedding model; a reranker's ScoreHead over its model's `score`."""
        if self.folder.scorer is None:
            return Pooler(self.output, self.ops).to(self.device)
        return ScoreHead(self.output, self.model.score, self.folder.scorer.activation, self.ops)

    def _attention(self):
        spec = attention_spec(self.folder)
        if self.device.type != "cuda":
            attention = TorchRaggedAttention(spec)
            attention.choice = single_choice("torch", "CPU: exact per-sequence SDPA")
            return attention
        from embedpipe.kernels.cuda.attention import make_cuda_attention
        return make_cuda_attention(self.config.attention, spec, self.device, self.dtype, self.max_seqlen,
                                   self.config.graphs.max_graph_tokens)

    @property
    def max_seqlen(self) -> int:
        """No sequence is longer than the position table; the padding sequence, than a large bucket step."""
        return max(int(self.folder.config.get("max_position_embeddings", self.folder.max_seq_length)), 256)

    def measure_attention(self) -> dict:
        """On CUDA: times the attention backends on this model's shape and stores the fastest per batch size
        for `attention="auto"` (attention_choice.py; engines built afterwards use it). Returns
        {"attention_<tokens>_tokens_<backend>_ms": ms, "attention_failed_<backend>": why}; {} when there is
        nothing to choose (the CPU, float32, a head_dim only one kernel runs)."""
        if self.device.type != "cuda":
            return {}
        from embedpipe.kernels.cuda.attention_timing import measure_and_store
        layers = int(self.folder.config.get("num_hidden_layers", 12))  # attention calls in a step
        timings, failed = measure_and_store(self.attn.spec, self.device, self.dtype, self.max_seqlen, layers,
                                            self.config.graphs.max_graph_tokens)
        out = {f"attention_{tokens}_tokens_{backend}_ms": ms
               for tokens, by_backend in sorted(timings.items()) for backend, ms in by_backend.items()}
        return out | {f"attention_failed_{backend}": why for backend, why in failed.items()}

    def warm_up(self) -> None:
        """One small batch through the model, so the first real one does not pay the kernels' start-up
        (Triton's JIT compile or cache load, cuBLAS handles): ~1-2.5 s of the first batches of a MiniLM
        index job on the H200, inside its clock. It counts as an eager run; warm_up_s records its time."""
        start = time.perf_counter()
        self.step(pack([[self.folder.config.get("pad_token_id") or 0] * 8], BucketPolicy())).result()
        self.warm_up_s = time.perf_counter() - start

    def claim_host_threads(self) -> None:
        """For a process whose work is feeding this engine (the index job's, an engine process, the server):
        on CUDA, one torch thread. The host side of a CUDA engine is small copies, and with more threads
        each one wakes OpenMP workers that then spin: on 32 cores an index job's process burned 28 cores
        its tokenizer workers needed, and ran 1.6x slower (benchmarks/profile_index.py). Process-wide, so
        the process entry points call it after loading (which does use the threads), never the Engine
        itself: a library user's process keeps its threads."""
        if self.device.type == "cuda":
            torch.set_num_threads(1)

    @property
    def attention(self) -> str:
        """The attention backend this engine runs, and why (attention_choice.AttentionChoice.describe)."""
        return self.attn.choice.describe()

    @property
    def max_in_flight(self) -> int:
        return self.config.max_in_flight

    @property
    def counters(self) -> GraphCounters:
        return self.runner.counters if self.runner is not None else GraphCounters()

    def forward(self, input_ids, cu_seqlens, token_type_ids=None) -> torch.Tensor:
        """input_ids [num_tokens_padded], cu_seqlens [num_seqs_padded + 1], token_type_ids None or as input_ids (a
        model that takes them: folder.takes_token_types) on the device -> [num_seqs_padded, output.width]."""
        positions, seq_ids = self.ops.token_layout(cu_seqlens, input_ids.shape[0])
        hidden = self.model(input_ids, positions, token_type_ids)
        return self.pooler(hidden, cu_seqlens, seq_ids)

    def forward_spans(self, input_ids, cu_seqlens, span_bounds) -> torch.Tensor:
        """Late chunking: as forward, but span_bounds [num_spans, 2] int32 on the device -> [num_spans,
        output.width], each span pooled from its sequence's hidden states (Pooler.spans). Never captured."""
        positions, _ = self.ops.token_layout(cu_seqlens, input_ids.shape[0])
        return self.pooler.spans(self.model(input_ids, positions), span_bounds)

    @torch.inference_mode()
    def step(self, batch: Batch) -> LazyTensor:
        """Embeds (or a reranker: scores) one packed batch; the handle's result() is [batch.num_rows, output.width]: a
        row per sequence, or with span_bounds (late chunking) a row per span, in order. Raises ValueError, before
        anything runs, for what the model cannot take: spans of a model that pools by CLS
        (OutputSpec.check_span_pooling) or of a reranker, token types for a model without them."""
        self._check(batch)
        if self.runner is not None:
            return self.runner.step(batch)
        self.attn.plan(batch.cu_seqlens, batch.num_seqs)
        if batch.span_bounds is not None:
            return LazyTensor(self.forward_spans(batch.input_ids, batch.cu_seqlens, batch.span_bounds))
        return LazyTensor(self.forward(batch.input_ids, batch.cu_seqlens, batch.token_type_ids)[: batch.num_seqs])

    def _check(self, batch: Batch) -> None:
        if batch.span_bounds is not None:
            if self.folder.scorer is not None:
                raise ValueError("a reranker scores whole sequences; late chunking's spans do not apply")
            self.output.check_span_pooling()
        if batch.token_type_ids is not None and not self.folder.takes_token_types:
            raise ValueError(f"the model {self.config.model} takes no token types (only a BERT cross-encoder does)")
