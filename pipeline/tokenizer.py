"""Text -> token ids with the model's own tokenizer.json (no transformers needed)."""
from __future__ import annotations

from pathlib import Path

from tokenizers import Encoding, Tokenizer

# A text longer than max_length * CUT_CHARS_PER_TOKEN characters is tokenized from a prefix of
# that many characters, doubled until it provably yields the whole text's kept tokens:
# tokenizing a 5 MB text whole takes seconds and a gigabyte, to keep its first max_length tokens.
CUT_CHARS_PER_TOKEN = 16


class TextTokenizer:
    """Tokenizes texts for one model: prompt prefix, special tokens, truncation to max_length."""

    def __init__(self, tokenizer_file: str | Path, max_length: int, prompt: str = ""):
        self.tokenizer_file = str(tokenizer_file)
        self.max_length = max_length
        self.prompt = prompt
        self._tokenizer = Tokenizer.from_file(self.tokenizer_file)
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length)

    def __reduce__(self):  # rebuilt from its file in worker processes
        return TextTokenizer, (self.tokenizer_file, self.max_length, self.prompt)

    def encode(self, texts: list[str]) -> tuple[list[list[int]], list[bool]]:
        """Returns the token ids of each text and whether it was truncated."""
        texts = [self.prompt + t for t in texts]
        first_cut = self.max_length * CUT_CHARS_PER_TOKEN
        encodings = self._tokenizer.encode_batch([t[:first_cut] for t in texts])
        for i, text in enumerate(texts):
            cut = first_cut
            while len(text) > cut and not keeps_whole_text_tokens(encodings[i]):
                cut *= 2
                encodings[i] = self._tokenizer.encode(text[:cut])
        return [e.ids for e in encodings], [bool(e.overflowing) for e in encodings]


def keeps_whole_text_tokens(prefix: Encoding) -> bool:
    """Whether the tokens kept from a text's prefix are the tokens kept from the whole text.

    Normalizers map characters locally; pre-tokenizers cut words looking at most one character
    past a word; models tokenize each word on its own. So once the prefix holds two more words
    after the word of the last kept token, the cut changed neither that word nor those before it.
    """
    kept = [word for word in prefix.word_ids if word is not None]
    later = [word for piece in prefix.overflowing for word in piece.word_ids if word is not None]
    return bool(later) and max(later) >= (kept[-1] if kept else -1) + 2
