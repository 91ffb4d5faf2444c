"""Writes model folders with random weights, for tests, GPU checks and benchmarks.

A folder holds a transformers checkpoint (config.json, model.safetensors), the
sentence-transformers files that choose pooling and normalisation, and the default model's
tokenizer files (its ids fit every vocabulary here). Needs `transformers` (the test extra).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from embedpipe.kernels.models.model_folder import builtin_models

VOCAB = 30522  # the default model's tokenizer
# with its config: transformers tokenizers then pad with its [PAD] (id 0), not a token of the model's own config
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")

SHAPES = {
    # name: (transformers config class, config kwargs, pooling, normalize)
    "tiny-bert": ("BertConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=512), "mean", True),
    "tiny-xlm-roberta": ("XLMRobertaConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                  intermediate_size=128, max_position_embeddings=514,
                                                  type_vocab_size=1, layer_norm_eps=1e-5), "cls", True),
    "tiny-qwen3": ("Qwen3Config", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=32, intermediate_size=128,
                                       max_position_embeddings=2048), "lasttoken", True),
    "tiny-qwen3-bidirectional": ("Qwen3Config", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                     num_key_value_heads=2, head_dim=32, intermediate_size=128,
                                                     max_position_embeddings=2048, use_bidirectional_attention=True),
                                 "mean", False),
    # all-MiniLM-L6-v2's shape (head_dim 32), for timing where its real weights are not at hand
    "minilm-l6": ("BertConfig", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                     intermediate_size=1536), "mean", True),
    "bert-base": ("BertConfig", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072), "cls", True),
    "qwen3-0.6b": ("Qwen3Config", dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                                       num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                                       max_position_embeddings=32768, rope_theta=1_000_000.0), "lasttoken", True),
    "pplx-embed-0.6b": ("Qwen3Config", dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                                            num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                                            max_position_embeddings=32768, rope_theta=1_000_000.0,
                                            use_bidirectional_attention=True), "mean", False),
}


def write_random_model(shape: str, folder: str | Path, seed: int = 0, max_seq_length: int = 512):
    """Writes a random-weight model folder of a named shape; returns the transformers model (float32)."""
    import torch
    import transformers

    config_class, kwargs, pooling, normalize = SHAPES[shape]
    config = getattr(transformers, config_class)(vocab_size=VOCAB, **kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(config).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    _write_sentence_transformers_files(folder, pooling, normalize, max_seq_length, config.hidden_size)
    for name in TOKENIZER_FILES:
        shutil.copy(builtin_models()["minilm"] / name, folder / name)
    return model


def _write_sentence_transformers_files(folder: Path, pooling: str, normalize: bool, max_seq_length: int,
                                       hidden: int) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules, indent=2))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    flags = {f"pooling_mode_{m}": pooling == k for k, m in
             (("cls", "cls_token"), ("mean", "mean_tokens"), ("lasttoken", "lasttoken"))}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": hidden, **flags}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
