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


SIGMOID, IDENTITY = "torch.nn.modules.activation.Sigmoid", "torch.nn.modules.linear.Identity"
TINY_QWEN3 = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  intermediate_size=128, max_position_embeddings=2048)
# the tiny rerankers' initialisation: transformers' 0.02 puts every random score within 1e-3 of 0.5, too close
# together for a test of their order to mean anything
SPREAD = dict(initializer_range=0.2)
RERANKER_SHAPES = {
    # name: (transformers config class, config kwargs, transformers auto class, CrossEncoder activation_fn and where
    # its sentence-transformers version saved it: "config.json" (v4, v5) or "config_sentence_transformers.json" (v6))
    "tiny-bert-cross-encoder": ("BertConfig", dict(SHAPES["tiny-bert"][1], num_labels=1, **SPREAD),
                                "AutoModelForSequenceClassification", (SIGMOID, "config.json")),
    "tiny-xlm-roberta-cross-encoder": ("XLMRobertaConfig", dict(SHAPES["tiny-xlm-roberta"][1], num_labels=1, **SPREAD),
                                       "AutoModelForSequenceClassification",
                                       (IDENTITY, "config_sentence_transformers.json")),
    # Qwen3-Reranker-0.6B ties lm_head to the embeddings; the 8B does not
    "tiny-qwen3-reranker": ("Qwen3Config", dict(TINY_QWEN3, tie_word_embeddings=True, **SPREAD),
                            "AutoModelForCausalLM", None),
    "tiny-qwen3-reranker-untied": ("Qwen3Config", dict(TINY_QWEN3, tie_word_embeddings=False, **SPREAD),
                                   "AutoModelForCausalLM", None),
    # the benchmark's shapes: a BERT-base cross-encoder (ms-marco-MiniLM's family, at base size), Qwen3-Reranker-0.6B
    "bert-base-cross-encoder": ("BertConfig", dict(SHAPES["bert-base"][1], num_labels=1),
                                "AutoModelForSequenceClassification", (SIGMOID, "config.json")),
    "qwen3-reranker-0.6b": ("Qwen3Config", dict(SHAPES["qwen3-0.6b"][1], tie_word_embeddings=True),
                            "AutoModelForCausalLM", None),
}
# XLM-R's pair template, `<s> A </s></s> B </s>` with one token type, written with the default tokenizer's tokens
XLM_R_PAIR = [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
              {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]


def write_random_model(shape: str, folder: str | Path, seed: int = 0, max_seq_length: int = 512):
    """Writes a random-weight model folder of a named shape (SHAPES, or RERANKER_SHAPES); returns the transformers
    model (float32)."""
    import torch
    import transformers

    if shape in RERANKER_SHAPES:
        return _write_reranker(shape, Path(folder), seed)
    config_class, kwargs, pooling, normalize = SHAPES[shape]
    config = getattr(transformers, config_class)(vocab_size=VOCAB, **kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(config).eval()
    folder = Path(folder)
    model.save_pretrained(folder)
    _write_sentence_transformers_files(folder, pooling, normalize, max_seq_length, config.hidden_size)
    _copy_tokenizer(folder)
    return model


def _write_reranker(shape: str, folder: Path, seed: int):
    """A reranker folder as the hub has them: a transformers checkpoint (no modules.json), a cross-encoder's
    activation_fn where sentence-transformers saved it, the default tokenizer (an XLM-R folder's with XLM-R's pair
    template: one token type)."""
    import torch
    import transformers

    config_class, kwargs, auto_class, activation = RERANKER_SHAPES[shape]
    config = getattr(transformers, config_class)(vocab_size=VOCAB, **kwargs)
    if activation is not None and activation[1] == "config.json":
        config.sentence_transformers = {"activation_fn": activation[0]}
    torch.manual_seed(seed)
    model = getattr(transformers, auto_class).from_config(config).eval()
    model.save_pretrained(folder)
    if activation is not None and activation[1] == "config_sentence_transformers.json":
        _write_cross_encoder_v6_files(folder, activation[0])
    _copy_tokenizer(folder)
    if config_class == "XLMRobertaConfig":
        _edit_json(folder / "tokenizer.json", lambda tokenizer: tokenizer["post_processor"].update(pair=XLM_R_PAIR))
        # transformers' BertTokenizer would rebuild BERT's template; the generic class keeps tokenizer.json's
        _edit_json(folder / "tokenizer_config.json",
                   lambda config: config.update(tokenizer_class="PreTrainedTokenizerFast"))
    return model


def _write_cross_encoder_v6_files(folder: Path, activation: str) -> None:
    """What sentence-transformers v6's CrossEncoder.save writes beside the checkpoint (its activation_fn among them)."""
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"model_type": "CrossEncoder", "activation_fn": activation, "prompts": {}, "default_prompt_name": None}))
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}]))
    (folder / "sentence_bert_config.json").write_text(json.dumps(
        {"transformer_task": "sequence-classification", "module_output_name": "scores",
         "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}}}))


def _edit_json(path: Path, edit) -> None:
    content = json.loads(path.read_text())
    edit(content)
    path.write_text(json.dumps(content))


def _copy_tokenizer(folder: Path) -> None:
    for name in TOKENIZER_FILES:
        shutil.copy(builtin_models()["minilm"] / name, folder / name)


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
