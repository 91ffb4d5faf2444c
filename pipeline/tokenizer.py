"""Text -> token ids with the model's own tokenizer.json (no transformers needed)."""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer


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
        encodings = self._tokenizer.encode_batch([self.prompt + t for t in texts])
        return [e.ids for e in encodings], [bool(e.overflowing) for e in encodings]
