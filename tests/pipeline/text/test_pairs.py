"""Pair tokenization for rerankers: the tokenizer's own pair encoding, cut on the document side and counted."""
import pytest

from embedpipe.kernels.engine import ModelSpec
from embedpipe.kernels.models.model_folder import read_model_folder
from embedpipe.kernels.pooling import OutputSpec
from embedpipe.kernels.testing.random_model import write_random_model
from embedpipe.pipeline.text.pairs import PairError, make_pair_tokenizer


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert-cross-encoder")
    write_random_model("tiny-bert-cross-encoder", folder)
    return folder


def tokenizer_of(folder, max_length=None):
    spec = ModelSpec(read_model_folder(str(folder), task="score"), OutputSpec("cls", False, 1))
    return make_pair_tokenizer(spec, max_length)


def test_pairs_are_the_tokenizers_pair_encoding_with_token_types(bert_folder):
    from transformers import AutoTokenizer
    reference = AutoTokenizer.from_pretrained(str(bert_folder))
    documents = ["a cat is an animal", "word " * 100, "Ein kurzer Satz über Katzen."]
    pairs = tokenizer_of(bert_folder, 32).encode("what is a cat?", documents)
    expected = reference(["what is a cat?"] * 3, documents, truncation="only_second", max_length=32)
    assert pairs.ids == expected["input_ids"] and pairs.types == expected["token_type_ids"]
    assert pairs.ids[0][0] == 101 and pairs.types[0][:6] == [0] * 6 and pairs.types[0][-1] == 1
    assert pairs.truncated == [False, True, False] and len(pairs.ids[1]) == 32


def test_a_long_document_keeps_the_tokens_of_the_whole_text(bert_folder):
    tokenizer = tokenizer_of(bert_folder, 64)
    long = "the quick brown fox jumps over the lazy dog " * 20_000  # 880k characters, read from a prefix
    pairs = tokenizer.encode("fox", [long, long[:2000]])
    assert pairs.ids[0] == pairs.ids[1] and pairs.truncated == [True, True]


def test_truncate_off_empty_texts_and_long_queries_are_errors(bert_folder):
    tokenizer = tokenizer_of(bert_folder, 32)
    with pytest.raises(PairError, match="document 1: .* longer than the model's 32 tokens"):
        tokenizer.encode("q", ["short", "word " * 100], truncate=False)
    with pytest.raises(PairError, match="document 1 is empty"):
        tokenizer.encode("q", ["a", ""])
    with pytest.raises(PairError, match="the query is empty"):
        tokenizer.encode("", ["a"])
    with pytest.raises(PairError, match="the query is longer than 28 tokens"):
        tokenizer.encode("word " * 40, ["a"])


def test_qwen3_reranker_pairs_follow_the_model_cards_template(tmp_path, bert_folder):
    write_random_model("tiny-qwen3-reranker", tmp_path)
    tokenizer = tokenizer_of(tmp_path, 200)
    [ids] = tokenizer.encode("what is a cat?", ["a cat is an animal"]).ids
    text = tokenizer._tokenizer.decode(ids)  # the folder has the default (WordPiece) tokenizer: lower case
    assert text.startswith("< | im _ start | > system judge whether the document meets the requirements")
    assert "< | im _ start | > user < instruct > : given a web search query" in text
    assert text.endswith("< query > : what is a cat? < document > : a cat is an animal < | im _ end | > "
                         "< | im _ start | > assistant < think > < / think >")
    assert ids.count(101) == ids.count(102) == 1  # this tokenizer's specials around the body, as the card's call adds
    with pytest.raises(ValueError, match="instruction is for Qwen3-Reranker"):
        make_pair_tokenizer(ModelSpec(read_model_folder(str(bert_folder), task="score"), None), instruction="x")


@pytest.mark.parametrize("shape", ["tiny-bert-cross-encoder", "tiny-qwen3-reranker"])
def test_a_max_length_shorter_than_the_template_is_refused(tmp_path, shape):
    write_random_model(shape, tmp_path)
    shortest = tokenizer_of(tmp_path, 200).min_length  # BERT: [CLS] q [SEP] d [SEP]; Qwen3: its prompt and instruction
    assert shortest == 5 if shape == "tiny-bert-cross-encoder" else shortest > 81  # 79 of prefix, suffix, specials
    with pytest.raises(ValueError, match=f"max-length {shortest - 1} is too short for this reranker"):
        tokenizer_of(tmp_path, shortest - 1)  # before: encode() looped for ever on a budget of no tokens
    pairs = tokenizer_of(tmp_path, shortest).encode("cat", ["a cat is an animal"])  # one query, one document token
    assert len(pairs.ids[0]) == shortest and pairs.truncated == [True]


def test_messages_number_the_documents_from_first(bert_folder):
    tokenizer = tokenizer_of(bert_folder, 32)
    with pytest.raises(PairError, match="document 11 is empty"):
        tokenizer.encode("q", ["a", ""], first=10)
    with pytest.raises(PairError, match="document 21: with the query, it is longer"):
        tokenizer.encode("q", ["a", "word " * 100], truncate=False, first=20)
