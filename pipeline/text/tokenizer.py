"""Text -> token ids with the model's own tokenizer.json (no transformers needed)."""
from __future__ import annotations

import functools
import hashlib
import itertools
from pathlib import Path
from typing import Callable

import numpy as np
from tokenizers import Encoding, Tokenizer

# A text longer than max_length * CUT_CHARS_PER_TOKEN characters is tokenized from a prefix of
# that many characters, doubled until it provably yields the whole text's kept tokens:
# tokenizing a 5 MB text whole takes seconds and a gigabyte, to keep its first max_length tokens.
CUT_CHARS_PER_TOKEN = 16
# The doubling stops at max(MAX_TEXT_CHARS, max_length * MAX_CHARS_PER_TOKEN) characters: a text is never
# read past them. Only a "word" that runs past that point (no space or punctuation in a megabyte, which
# no prose has) can make the kept tokens differ from the whole text's; without the bound, one such
# 10 MB word cost 5 s of tokenizing (0.5 us per character, measured with MiniLM's WordPiece).
MAX_TEXT_CHARS = 1 << 20
MAX_CHARS_PER_TOKEN = 64


class TextTokenizer:
    """Tokenizes texts for one model: prompt prefix, special tokens, truncation to max_length."""

    def __init__(self, tokenizer_file: str | Path, max_length: int, prompt: str = "", vocab_size: int | None = None):
        self.tokenizer_file = str(tokenizer_file)
        self.max_length = max_length
        self.prompt = prompt
        self.vocab_size = vocab_size  # the model's embedding rows: token ids must be below it
        self._tokenizer = Tokenizer.from_file(self.tokenizer_file)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length)
        self.max_text_chars = max(MAX_TEXT_CHARS, max_length * MAX_CHARS_PER_TOKEN)

    def __reduce__(self):  # rebuilt from its file in worker processes
        return TextTokenizer, (self.tokenizer_file, self.max_length, self.prompt, self.vocab_size)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Names the token ids this tokenizer makes: a hash of its tokenizer.json and its max length."""
        digest = hashlib.sha256(Path(self.tokenizer_file).read_bytes()).hexdigest()[:16]
        return f"sha256:{digest}/max_length:{self.max_length}"

    @functools.cached_property
    def last_special_id(self) -> int | None:
        """The special token the tokenizer ends every sequence with ([SEP], <|endoftext|>), if any:
        cutting token ids to max_length keeps it last, as the tokenizer's own truncation does."""
        with_text = self._tokenizer.encode("a").ids
        specials = set(self._tokenizer.encode("").ids)  # an empty text is its special tokens alone
        return with_text[-1] if with_text and with_text[-1] in specials else None

    def encode(self, texts: list[str]) -> tuple[list[list[int]], list[bool]]:
        """Returns the token ids of each text and whether it was truncated."""
        encodings, truncated = self._encodings(texts)
        return [e.ids for e in encodings], truncated

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """token ids [sum(lengths)] int32 end to end, lengths [len(texts)] int32, truncated [len(texts)] bool."""
        encodings, truncated = self._encodings(texts)
        ids = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
        return flat, lengths, np.array(truncated, dtype=np.bool_)

    def _encodings(self, texts: list[str]) -> tuple[list[Encoding], list[bool]]:
        """Each text's encoding, and whether tokens were cut from it (or it was read only up to max_text_chars)."""
        first_cut = self.max_length * CUT_CHARS_PER_TOKEN
        # encode_batch_fast skips the character offsets (~15% faster); only word_ids are needed, and only
        # for texts longer than the first cut, which are encoded again below. The prompt is joined to the
        # prefix only: joining it to a 10 MB text copies the 10 MB.
        encode_batch = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        encodings = encode_batch([self.prompt + t[:first_cut] for t in texts])
        truncated = [bool(e.overflowing) for e in encodings]
        for i, text in enumerate(texts):
            if len(text) > first_cut:
                encodings[i], read_whole = self._encode_prefix(text, first_cut)
                truncated[i] = bool(encodings[i].overflowing) or not read_whole
        return encodings, truncated

    def _encode_prefix(self, text: str, cut: int) -> tuple[Encoding, bool]:
        """The text's kept tokens, from the shortest prefix of cut * 2^k characters that provably holds them, and
        True; or, past max_text_chars, the tokens of that prefix and False."""
        return encode_shortest_prefix(lambda prefix: self._tokenizer.encode_batch([self.prompt + prefix])[0], text,
                                      cut, self.max_text_chars, keeps_whole_text_tokens)


def encode_shortest_prefix(encode: Callable[[str], Encoding], text: str, cut: int, bound: int,
                           holds: Callable[[Encoding], bool]) -> tuple[Encoding, bool]:
    """encode(text[:c]) for the shortest c of cut * 2^k characters (at most bound) whose encoding `holds` the
    tokens the whole text would give, and True; or the encoding of the bound's prefix, and False. `encode` should
    call encode_batch, which releases the GIL while it works; encode holds it (a 3 MB word paused other threads
    2.4 s)."""
    while True:
        cut = min(cut, bound)
        encoding = encode(text[:cut])
        if cut >= len(text) or holds(encoding):
            return encoding, True
        if cut >= bound:
            return encoding, False
        cut *= 2


def keeps_whole_text_tokens(prefix: Encoding) -> bool:
    """Whether the tokens kept from a text's prefix are the tokens kept from the whole text.

    Normalizers map characters locally; pre-tokenizers cut words looking at most one character
    past a word; models tokenize each word on its own. So once the prefix holds two more words
    after the word of the last kept token, the cut changed neither that word nor those before it.
    """
    return holds_two_more_words(prefix.word_ids, [word for piece in prefix.overflowing for word in piece.word_ids])


def holds_two_more_words(kept_words: list, later_words: list) -> bool:
    """Whether the word ids after a cut (later_words) reach two words past the last kept one's (None: a special
    token): then the cut changed no kept token (keeps_whole_text_tokens gives the reason)."""
    kept = [word for word in kept_words if word is not None]
    later = [word for word in later_words if word is not None]
    return bool(later) and max(later) >= (kept[-1] if kept else -1) + 2


def checked_max_length(folder, max_length: int | None) -> int:
    """A tokens-per-text cap (None: the folder's max_seq_length); ValueError outside 1 to max_seq_length."""
    if max_length is not None and not 1 <= max_length <= folder.max_seq_length:
        raise ValueError(f"max-length must be from 1 to the model's max_seq_length {folder.max_seq_length}, "
                         f"not {max_length}")
    return max_length or folder.max_seq_length


def make_tokenizer(model, prompt: str | None = None, prompt_name: str | None = None,
                   max_length: int | None = None) -> TextTokenizer:
    """The tokenizer of a model (an Engine or a ModelSpec: anything with its ModelFolder as .folder) with a
    literal prompt, or a named prompt from the model's config; max_length caps the tokens per text (prompt and
    special tokens included) below the model's max_seq_length (None: that). Raises ValueError for a cap outside
    1 to max_seq_length, or a prompt name the model lacks."""
    folder = model.folder
    text = prompt if prompt is not None else folder.prompt(prompt_name)
    return TextTokenizer(folder.tokenizer_file, checked_max_length(folder, max_length), text,
                         folder.config.get("vocab_size"))
