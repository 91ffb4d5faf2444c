"""Builds a model from a local folder and loads its safetensors weights (single file or sharded)."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch
from torch import nn

from embedpipe.kernels.attention import AttentionBackend, AttentionSpec
from embedpipe.kernels.models.layers import CheckpointRows, PackedLinear
from embedpipe.kernels.models.model_folder import MODEL_FAMILIES, SCORER_FAMILIES, ModelFolder, ModelLoadError

RENAMES = (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias"))
# one state-dict tensor a checkpoint tensor fills: (its name, rows of a packed weight it fills or None, rows of the
# checkpoint tensor it takes or None)
Target = tuple[str, "tuple[int, int] | None", "tuple[int, ...] | None"]


def model_class(model_type: str) -> type[nn.Module]:
    """The class that runs a model_type (model_folder.MODEL_FAMILIES, the one registry)."""
    return _import_class(*MODEL_FAMILIES[model_type])


def folder_class(folder: ModelFolder) -> type[nn.Module]:
    """The class that runs a folder: its reranker's (model_folder.SCORER_FAMILIES), else its model_type's."""
    if folder.scorer is not None:
        return _import_class(*SCORER_FAMILIES[folder.scorer.architecture])
    return model_class(folder.model_type)


def _import_class(module: str, name: str) -> type[nn.Module]:
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


def attention_spec(folder: ModelFolder) -> AttentionSpec:
    return folder_class(folder).attention_spec(folder.config)


def build_model(folder: ModelFolder, attn: AttentionBackend, ops) -> nn.Module:
    return folder_class(folder).from_folder(folder, attn, ops)


def load_model(folder: ModelFolder, attn: AttentionBackend, ops, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Builds the model for the folder's model_type, loads every weight, moves it to device/dtype."""
    with torch.device("meta"):
        model = build_model(folder, attn, ops)
    model = model.to_empty(device="cpu")
    targets = _checkpoint_targets(model)
    loaded = _load_weights(model, folder, targets)
    missing = sorted(set(targets) - loaded)
    if missing:
        raise ModelLoadError(f"model folder {folder.path}: the weights lack {len(missing)} tensors the "
                             f"{folder.model_type} model needs, e.g. {', '.join(missing[:5])}")
    _reset_buffers(model)
    return model.to(device=device, dtype=dtype).eval()


def _reset_buffers(model: nn.Module) -> None:
    """Non-persistent buffers (rotary tables, bit weights) were made on meta: rebuild them on the CPU."""
    for module in model.modules():
        rebuild = getattr(module, "rebuild_buffers", None)
        if rebuild is not None:
            rebuild()


def weight_files(folder: ModelFolder) -> list[Path]:
    path = folder.path
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelLoadError(f"model folder {path}: model.safetensors.index.json names missing shards {missing}")
        return [path / s for s in shards]
    raise ModelLoadError(f"model folder {path} is missing model.safetensors (or model.safetensors.index.json)")


def _load_weights(model: nn.Module, folder: ModelFolder, targets: dict) -> set[str]:
    """Copies every checkpoint tensor into its parameter; returns the checkpoint names filled."""
    from safetensors import SafetensorError, safe_open

    params = model.state_dict(keep_vars=True)
    loaded: set[str] = set()
    for file in weight_files(folder):
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    name = _normalize_key(key, model)
                    if name not in targets:
                        continue
                    tensor = f.get_tensor(key)
                    for param_name, rows, source_rows in targets[name]:
                        taken = tensor if source_rows is None else tensor[list(source_rows)]
                        _copy(params[param_name], rows, taken, key, file)
                    loaded.add(name)
        except SafetensorError as error:  # a truncated or damaged file
            raise ModelLoadError(f"{file} is not a readable safetensors file: {error}") from error
    return loaded


def _normalize_key(key: str, model: nn.Module) -> str:
    for prefix in model.checkpoint_prefixes:
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    for old, new in RENAMES:
        key = key.replace(old, new)
    return key


def _checkpoint_targets(model: nn.Module) -> dict[str, list[Target]]:
    """Checkpoint name -> the tensors it fills, for every tensor needed. One checkpoint tensor may fill two (a tied
    embedding: the embedding table and the rows of a head)."""
    targets = {name: [(name, None, None)] for name in model.state_dict()}
    for module_name, module in model.named_modules():
        if isinstance(module, CheckpointRows):
            del targets[f"{module_name}.weight"]
            targets.setdefault(module.source, []).append((f"{module_name}.weight", None, module.rows))
        if not isinstance(module, PackedLinear):
            continue
        parent = module_name.rsplit(".", 1)[0]
        for kind in ("weight", "bias") if module.bias is not None else ("weight",):
            del targets[f"{module_name}.{kind}"]
            for shard, rows in module.shards.items():
                targets[f"{parent}.{shard}.{kind}"] = [(f"{module_name}.{kind}", rows, None)]
    return targets


def _copy(param: torch.Tensor, rows: tuple[int, int] | None, tensor: torch.Tensor, key: str, file: Path) -> None:
    dest = param.data if rows is None else param.data.narrow(0, *rows)
    if dest.shape != tensor.shape:
        raise ModelLoadError(f"{file}: tensor {key} has shape {tuple(tensor.shape)}, "
                             f"the model expects {tuple(dest.shape)} (does config.json match the weights?)")
    dest.copy_(tensor)
