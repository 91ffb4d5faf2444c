"""The index job's configuration: flat options (the CLI and TOML files share their names) and JobConfig.

Importing this module imports neither torch nor pyarrow: the CLI reads option defaults from it.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedpipe.pipeline.errors import UserError

if TYPE_CHECKING:
    from embedpipe.kernels.engine import EngineConfig
    from embedpipe.pipeline.batching.batcher import BatcherConfig
    from embedpipe.pipeline.inputs.sources import ColumnSpec
    from embedpipe.pipeline.text.chunking import ChunkConfig

BAD_ROW_POLICIES = ("skip", "fail")
# On the CPU, torch already runs on every core: tokenizer processes would only contend with it,
# and batches of a few thousand tokens keep the activations in cache (faster than 16384 there).
CPU_BATCH_TOKENS = 4096
CPU_WORKERS = 0


class ConfigError(UserError, ValueError):
    """Options or a config file that cannot make a job; the message says which."""


@dataclass(frozen=True)
class DeviceSpec:
    """`--devices`: the engines of a job, one per device.

    all -> every GPU; 0,1,3 -> these CUDA devices; gpu:N -> N GPUs; cpu:N -> N CPU engines.
    Resolved where the engines run: this machine's GPUs (pipeline/scale/devices.py) or a Ray cluster's.
    """

    kind: str  # "cuda" | "cpu"
    indices: tuple[int, ...] = ()  # cuda: these devices
    count: int | None = None  # this many; None with no indices: every GPU

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        text = text.strip().lower()
        kind, colon, count = text.partition(":")
        if text == "all":
            return cls("cuda")
        if colon and kind in ("cpu", "gpu"):
            if not count.isdigit() or int(count) < 1:
                raise ConfigError(f"devices {text!r}: the count after {kind}: must be a positive integer")
            return cls("cpu" if kind == "cpu" else "cuda", count=int(count))
        indices = [part.strip() for part in text.split(",")]
        if not all(index.isdigit() for index in indices):
            raise ConfigError(f"devices must be all, CUDA device indices (0,1,3), gpu:N or cpu:N, not {text!r}")
        if len(set(map(int, indices))) != len(indices):
            raise ConfigError(f"devices {text!r} names a device twice")
        return cls("cuda", indices=tuple(map(int, indices)))


@dataclass(frozen=True)
class IndexOptions:
    """The `index` command's options by name. A TOML config file uses the same names."""

    inputs: tuple[str, ...] = ()
    output: str | None = None
    model: str = "minilm"
    device: str = "auto"
    precision: str | None = None  # weights and activations; None: bfloat16 on CUDA, float32 on CPU
    dtype: str = "float32"  # stored embeddings
    dim: int | None = None
    prompt: str | None = None
    prompt_name: str | None = None
    max_length: int | None = None  # tokens per text, below the model's max_seq_length; None: that
    chunk_tokens: int | None = None  # cut each text into windows of at most this many tokens; None: cut it off
    chunk_overlap: int | None = None  # tokens a window repeats of the one before; None: 0
    chunk_on: str | None = None  # where a window ends: "token" (a word boundary) or "sentence"; None: token
    late_chunking: bool = False  # pool each window from one pass over its whole text (needs chunk_tokens)
    text_column: str = "text"
    token_ids_column: str | None = None  # embed these token ids (pre-tokenised input) instead of the text
    id_column: str | None = None  # None: `id` when the input has it, else FILE:ROW
    keep_columns: tuple[str, ...] = ()  # names, or comma-separated lists of names
    index_factory: str | None = None  # None: the dtype's (Flat; SQ8 for int8: output_dtypes.py)
    rows_per_unit: int = 65536
    read_rows: int = 1024
    max_batch_tokens: int | None = None  # None: 16384 on a GPU, CPU_BATCH_TOKENS on the CPU
    max_batch_seqs: int = 512
    workers: int | None = None  # tokenizer processes; None: CPU count - 1 on a GPU, CPU_WORKERS on the CPU
    shard_index: int | None = None
    num_shards: int | None = None
    on_bad_row: str = "skip"
    skip_bad_files: bool = False
    overwrite: bool = False
    prune: bool = False  # drop the done units whose input file is no longer among the inputs
    quiet: bool = False
    devices: str | None = None  # DeviceSpec text; None: one engine in this process, on `device`
    ray: str | None = None  # a Ray cluster: auto, local, HOST:PORT or ray://HOST:PORT; None: no Ray


@dataclass(frozen=True)
class JobConfig:
    """Everything one `index` run needs, validated."""

    inputs: tuple[str, ...]
    output: Path
    columns: ColumnSpec
    engine: EngineConfig
    batching: BatcherConfig
    num_workers: int | None = None
    rows_per_unit: int = 65536
    read_rows: int = 1024  # rows per record batch read, and per tokenizer chunk
    index_factory: str = "Flat"
    shard_index: int = 0
    num_shards: int = 1
    on_bad_row: str = "skip"
    skip_bad_files: bool = False
    overwrite: bool = False
    prune: bool = False
    quiet: bool = False
    prompt: str | None = None
    prompt_name: str | None = None
    max_length: int | None = None  # tokens per text (make_tokenizer); None: the model's max_seq_length
    chunking: ChunkConfig | None = None  # each text cut into windows, one output row each; None: one row per text
    devices: DeviceSpec | None = None  # None: one engine in this process, on engine.device
    ray_address: str | None = None  # run the engines on this Ray cluster

    def __post_init__(self):
        if not self.inputs:
            raise ConfigError("no inputs: name input files, folders or globs (or `inputs` in the config file)")
        if self.rows_per_unit <= 0 or self.read_rows <= 0:
            raise ConfigError("rows-per-unit and read-rows must be positive")
        if not 0 <= self.shard_index < self.num_shards:
            raise ConfigError(f"shard-index must be in [0, num-shards), got {self.shard_index} of {self.num_shards}")
        if self.on_bad_row not in BAD_ROW_POLICIES:
            raise ConfigError(f"on-bad-row must be one of {', '.join(BAD_ROW_POLICIES)}, not {self.on_bad_row!r}")
        if self.num_workers is not None and self.num_workers < 0:
            raise ConfigError("workers must be >= 0 (0 tokenizes in the main process)")
        if self.prompt is not None and self.prompt_name is not None:
            raise ConfigError("give either prompt or prompt-name, not both")
        if self.ray_address is not None and (self.devices is None or self.devices.indices):
            raise ConfigError("on Ray, the cluster assigns the GPUs: devices must be all, gpu:N or cpu:N")

    @property
    def sharded(self) -> bool:
        return self.num_shards > 1

    @property
    def shard(self) -> tuple[int, int] | None:
        """(index, count) of a sharded job (output_lock's shard), None for a whole job."""
        return (self.shard_index, self.num_shards) if self.sharded else None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Option values from a TOML file: a flat table, keys spelled like the options (dashes or underscores)."""
    try:
        with open(path, "rb") as file:
            table = tomllib.load(file)
    except OSError as error:
        raise ConfigError(f"cannot read config file {path}: {error.strerror or error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from error
    annotations = {f.name: f.type for f in fields(IndexOptions)}
    values = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in annotations:
            known = ", ".join(n.replace("_", "-") for n in annotations)
            raise ConfigError(f"{path}: unknown option {key!r}; options are: {known}")
        values[name] = _checked(path, key, annotations[name], value)
    return values


def _checked(path, key: str, annotation: str, value: Any) -> Any:
    kind = annotation.split(" | ")[0]
    if kind == "tuple[str, ...]":
        value = [value] if isinstance(value, str) else value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif isinstance(value, {"str": str, "int": int, "bool": bool}[kind]) and \
            not (kind == "int" and isinstance(value, bool)):
        return value
    expected = "a list of strings" if kind.startswith("tuple") else f"a {kind}"
    raise ConfigError(f"{path}: {key} must be {expected}, not {value!r}")


def merge_options(config_file: str | Path | None, given: dict[str, Any]) -> IndexOptions:
    """Defaults, then the config file's values, then the options given on the command line."""
    from_file = read_config_file(config_file) if config_file is not None else {}
    return replace(IndexOptions(), **{**from_file, **given})


def split_names(values: tuple[str, ...]) -> tuple[str, ...]:
    """("a,b", "c") -> ("a", "b", "c")."""
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


def job_config(options: IndexOptions) -> JobConfig:
    """Builds and validates the job's configs; raises ConfigError / ValueError with the reason."""
    from embedpipe.kernels.engine import EngineConfig
    from embedpipe.kernels.graph_cache import GraphConfig
    from embedpipe.kernels.output_dtypes import output_dtype
    from embedpipe.pipeline.batching.batcher import BatcherConfig
    from embedpipe.pipeline.inputs.sources import ColumnSpec

    o = options
    if o.output is None:
        raise ConfigError("no output folder: pass --output (or `output` in the config file)")
    if (o.shard_index is None) != (o.num_shards is None):
        raise ConfigError("--shard-index and --num-shards go together")
    for name in ("max_batch_tokens", "num_shards"):  # 0 read as "not given" and ran the defaults
        if getattr(o, name) is not None and getattr(o, name) <= 0:
            raise ConfigError(f"{name.replace('_', '-')} must be positive, not {getattr(o, name)}")
    output = Path(o.output)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output {output} is a file; name a folder (new or an earlier run's)")
    if o.overwrite and (o.num_shards or 1) > 1:  # each shard would discard the others' results
        raise ConfigError("--overwrite discards everything in OUTPUT, the other shards' results too; clear "
                          "OUTPUT (or pick a new one) before starting the shards, without --overwrite")
    devices = _device_spec(o)
    on_cpu = devices.kind == "cpu" if devices else _device_type(o.device) == "cpu"
    max_batch_tokens = o.max_batch_tokens or (CPU_BATCH_TOKENS if on_cpu else BatcherConfig().max_batch_tokens)
    graphs = GraphConfig(max_graph_tokens=max(max_batch_tokens, GraphConfig().max_graph_tokens))
    # the host sleeps while a batch runs: on a GPU its core goes to the tokenizer workers
    engine = EngineConfig(model=o.model, device=o.device, dtype=o.precision, dim=o.dim,
                          output_dtype=o.dtype, graphs=graphs, spin_wait=False)
    return JobConfig(
        inputs=tuple(o.inputs), output=Path(o.output),
        columns=ColumnSpec(o.text_column, o.id_column, split_names(o.keep_columns), o.token_ids_column),
        engine=engine, batching=BatcherConfig(max_batch_tokens, o.max_batch_seqs),
        num_workers=CPU_WORKERS if o.workers is None and on_cpu else o.workers,
        rows_per_unit=o.rows_per_unit, read_rows=o.read_rows,
        index_factory=o.index_factory or output_dtype(o.dtype).default_index_factory,
        shard_index=o.shard_index or 0, num_shards=o.num_shards or 1, on_bad_row=o.on_bad_row,
        skip_bad_files=o.skip_bad_files, overwrite=o.overwrite, prune=o.prune, quiet=o.quiet, prompt=o.prompt,
        prompt_name=o.prompt_name, max_length=o.max_length, chunking=_chunking(o), devices=devices, ray_address=o.ray)


def _chunking(o: IndexOptions) -> ChunkConfig | None:
    """The job's windows (chunk_config); pre-tokenised input has none to cut."""
    if o.chunk_tokens is not None and o.token_ids_column is not None:
        raise ConfigError("--chunk-tokens cuts texts at their characters; it cannot cut --token-ids-column's token ids")
    return chunk_config(o.chunk_tokens, o.chunk_overlap, o.chunk_on, o.late_chunking)


def chunk_config(tokens: int | None, overlap: int | None, on: str | None, late: bool = False) -> ChunkConfig | None:
    """--chunk-tokens with --chunk-overlap, --chunk-on (None: each not given) and --late-chunking; None without
    --chunk-tokens. Raises ConfigError for values ChunkConfig refuses, or the others alone."""
    from embedpipe.pipeline.text.chunking import ChunkConfig

    if tokens is None:
        if overlap is not None or on is not None or late:
            raise ConfigError("--chunk-overlap, --chunk-on and --late-chunking shape the windows of --chunk-tokens; "
                              "give it too")
        return None
    try:
        return ChunkConfig(tokens, overlap or 0, on or "token", bool(late))
    except ValueError as error:
        raise ConfigError(str(error)) from error


def _device_spec(o: IndexOptions) -> DeviceSpec | None:
    """The engines' devices: --devices, or every GPU of the cluster with --ray; None: one engine on --device.

    --devices replaces --device, which may still say the same kind (a GPU config file's `device = "cuda"`)."""
    if o.devices is None and o.ray is None:
        return None
    spec = DeviceSpec.parse(o.devices or "all")
    if o.device != "auto" and _device_type(o.device) != spec.kind:
        raise ConfigError(f"device {o.device!r} and devices {o.devices or 'all'!r} disagree; "
                          "--devices alone picks the engines' devices")
    return spec


def _device_type(device: str) -> str:
    from embedpipe.kernels.engine import EngineConfig

    try:
        return EngineConfig(device=device).device_type
    except RuntimeError as error:
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, not {device!r}") from error
