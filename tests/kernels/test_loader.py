"""Loading model folders: sharded weights, and one clear error for each broken folder."""
import json
import shutil

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from embedpipe.kernels.batch import pack
from embedpipe.kernels.engine import Engine, EngineConfig
from embedpipe.kernels.models.model_folder import ModelLoadError, builtin_models


@pytest.fixture
def minilm_copy(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(builtin_models()["minilm"], folder)
    return folder


def _embed(folder):
    engine = Engine(EngineConfig(model=str(folder), device="cpu"))
    return engine.step(pack([[101, 7592, 2088, 102]])).result().numpy()


def test_sharded_safetensors_load_like_one_file(minilm_copy):
    single = _embed(minilm_copy)
    tensors = load_file(minilm_copy / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, minilm_copy / file)
    weight_map = {k: f for f, keys in shards.items() for k in keys}
    (minilm_copy / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (minilm_copy / "model.safetensors").unlink()
    np.testing.assert_array_equal(_embed(minilm_copy), single)


def test_prefixed_checkpoint_names_load(minilm_copy):
    single = _embed(minilm_copy)
    tensors = load_file(minilm_copy / "model.safetensors")
    save_file({f"bert.{k}": v for k, v in tensors.items()}, minilm_copy / "model.safetensors")
    np.testing.assert_array_equal(_embed(minilm_copy), single)


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "modules.json", "1_Pooling/config.json"])
def test_missing_file_is_named(minilm_copy, missing):
    (minilm_copy / missing).unlink()
    with pytest.raises(ModelLoadError) as e:
        _embed(minilm_copy)
    assert missing in str(e.value) and str(minilm_copy) in str(e.value)


def test_missing_tokenizer_is_named(minilm_copy):
    (minilm_copy / "tokenizer.json").unlink()
    engine = Engine(EngineConfig(model=str(minilm_copy), device="cpu"))
    with pytest.raises(ModelLoadError, match="tokenizer.json"):
        engine.folder.tokenizer_file


def test_unknown_architecture_lists_supported(minilm_copy):
    config = json.loads((minilm_copy / "config.json").read_text())
    config.update(model_type="gpt2", architectures=["GPT2Model"])
    (minilm_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as e:
        _embed(minilm_copy)
    assert "gpt2" in str(e.value) and "bert" in str(e.value) and "qwen3" in str(e.value)


def test_wrong_tensor_shape_names_the_tensor(minilm_copy):
    config = json.loads((minilm_copy / "config.json").read_text())
    config["intermediate_size"] = 1000
    (minilm_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as e:
        _embed(minilm_copy)
    message = str(e.value)
    assert "model.safetensors" in message and "intermediate.dense." in message
    assert "1536" in message and "1000" in message


def test_truncated_weights_are_named(minilm_copy):
    weights = minilm_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match="model.safetensors is not a readable safetensors file"):
        _embed(minilm_copy)


def test_missing_tensor_is_named(minilm_copy):
    tensors = load_file(minilm_copy / "model.safetensors")
    del tensors["encoder.layer.3.attention.self.key.weight"]
    save_file(tensors, minilm_copy / "model.safetensors")
    with pytest.raises(ModelLoadError, match=r"encoder\.layer\.3\.attention\.self\.key\.weight"):
        _embed(minilm_copy)


def test_unknown_model_name(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache, whatever this machine's holds
    with pytest.raises(ModelLoadError, match="never downloads"):
        Engine(EngineConfig(model="sentence-transformers/all-mpnet-base-v2", device="cpu"))


def test_every_model_type_in_the_registry_names_a_class_that_builds_from_a_folder():
    from torch import nn

    from embedpipe.kernels.models.loader import model_class
    from embedpipe.kernels.models.model_folder import MODEL_FAMILIES

    for model_type in MODEL_FAMILIES:
        cls = model_class(model_type)
        assert issubclass(cls, nn.Module) and callable(cls.from_folder) and callable(cls.attention_spec)
