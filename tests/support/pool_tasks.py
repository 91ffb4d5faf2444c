"""Tasks for TokenizerPool tests (importable in the spawned workers: tests/ is on their sys.path)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from embedpipe.pipeline.text.tokenizer import TextTokenizer


@dataclass(frozen=True)
class EncodeTexts:
    """One reply: the texts' (token_ids, lengths, truncated), as TextTokenizer.encode_flat gives them."""

    texts: list

    def run(self, tokenizer: TextTokenizer):
        yield tokenizer.encode_flat(list(self.texts))


@dataclass(frozen=True)
class StampedReplies:
    """`count` replies, each the CLOCK_MONOTONIC time (system-wide on Linux) at which it was made."""

    count: int

    def run(self, tokenizer: TextTokenizer):
        for _ in range(self.count):
            yield time.monotonic()

