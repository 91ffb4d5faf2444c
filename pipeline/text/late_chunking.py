"""Late chunking (`--late-chunking`): a text's windows pooled from one forward pass over the whole text.

The windows are chunking.WindowCutter's (the same token ranges and character spans as --chunk-tokens),
but instead of embedding each window's text on its own, the text's tokens run through the model as
one sequence (a "document") and each window's vector pools the document's hidden states over the
window's tokens (kernels: Batch.span_bounds), so every window sees the whole text. A text longer than
the max length (the model's max_seq_length, or --max-length) runs as several documents of whole
windows, each at most that long. A document is the tokenizer's leading special tokens, the prompt's
tokens, a run of the text's tokens, and the closing special tokens; spans cover text tokens only (a
text of no tokens: its one span covers its document, specials included, so it still has a vector).
"""
from __future__ import annotations

import numpy as np

from embedpipe.pipeline.text.chunking import ChunkConfig, CutTexts, TextWindows, WindowCutter, window_rows
from embedpipe.pipeline.text.tokenizer import TextTokenizer


def chunker_of(tokenizer: TextTokenizer, config: ChunkConfig) -> WindowCutter | LateChunker:
    """What cuts a job's texts: `cut(texts) -> CutTexts`, windows embedded alone or (config.late) late-chunked.
    Raises ChunkConfigError for options that cannot make windows."""
    cutter = WindowCutter.of(tokenizer, config)
    return LateChunker(cutter, tokenizer.max_length) if config.late else cutter


class LateChunker:
    """Cuts texts into a WindowCutter's windows and groups them into documents of at most max_length tokens."""

    def __init__(self, cutter: WindowCutter, max_length: int):
        self.cutter = cutter
        self.prefix, self.suffix = cutter.special_tokens()
        self.prompt_ids = cutter.prompt_ids()
        self.head = len(self.prefix) + len(self.prompt_ids)  # tokens before the text's in a document
        # text tokens per document: at least a window's (WindowCutter checks --chunk-tokens <= max_length)
        self.budget = max_length - self.head - len(self.suffix)

    def cut(self, texts: list[str]) -> CutTexts:
        """The texts' windows, with their documents' token ids and the windows' spans in them (CutTexts.spans)."""
        windows = self.cutter.windows(texts)
        rows, chunk, char_start, char_end, window_texts = window_rows(texts, windows)
        documents = [document for w in windows for document in self._documents(w)]
        sequences, spans = [seq for seq, _ in documents], [span for _, span in documents]
        lengths = np.fromiter(map(len, sequences), dtype=np.int32, count=len(sequences))
        counts = np.fromiter(map(len, spans), dtype=np.int32, count=len(spans))
        num_truncated = sum(int((w.token_end - w.token_start > self.budget).sum()) for w in windows)
        return CutTexts(rows, chunk, char_start, char_end, window_texts, _concatenate(sequences, np.int32), lengths,
                        num_truncated, (_concatenate(spans, np.int32).reshape(-1, 2), counts))

    def _documents(self, windows: TextWindows) -> list[tuple[np.ndarray, np.ndarray]]:
        """(document token ids [L], its windows' spans [k, 2]) per document of one text: runs of whole
        windows, greedily, each document's text tokens within the budget. A window with no clean cut inside
        N runs past it (WindowCutter); alone in its document, its tokens past the budget are cut."""
        out, first = [], 0
        starts, ends = windows.token_start, np.minimum(windows.token_end, windows.token_start + self.budget)
        while first < len(windows):
            # the last window whose end is within the budget of this document's first token
            last = max(int(np.searchsorted(ends, starts[first] + self.budget, side="right")) - 1, first)
            base = int(starts[first])
            text_ids = windows.content_ids[base:int(ends[last])]
            sequence = np.concatenate([self.prefix, self.prompt_ids, text_ids, self.suffix]).astype(np.int32)
            spans = np.stack([starts[first:last + 1], ends[first:last + 1]], axis=1) - base + self.head
            if not len(text_ids):  # a text of no tokens: pool its whole document
                spans = np.array([[0, len(sequence)]])
            out.append((sequence, spans))
            first = last + 1
        return out


def _concatenate(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)
