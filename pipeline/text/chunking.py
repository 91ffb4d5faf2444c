"""Long texts cut into windows of at most N tokens, each embedded on its own (`--chunk-tokens N`).

A text is tokenized whole, without the prompt and the special tokens (no truncation, no prefix:
nothing is lost), with character offsets and word ids. The cutter (cut_windows, a pure function
of those) picks windows of at most `budget` content tokens, budget = N - the special tokens the
tokenizer adds - the prompt's tokens, so that a window with its prompt and specials fits N.
Window w's span text[char_start[w]:char_end[w]] holds its tokens and the text between them: the
first starts at 0, the last ends at len(text), and each starts at or before the previous one's
end, so the spans cover the whole text. A window is embedded as prompt + its span, tokenized as
any text (cut at N as a safety net, counted as truncated if that ever fires): its vector is
`embed` of its text. No torch and no pyarrow: the tokenizer workers run this.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from tokenizers import Encoding, Tokenizer

from embedpipe.pipeline.errors import UserError
from embedpipe.pipeline.text.boundaries import Boundaries, sentence_ends
from embedpipe.pipeline.text.tokenizer import TextTokenizer

CHUNK_MODES = ("token", "sentence")


class ChunkConfigError(UserError, ValueError):
    """Chunking options that cannot make windows; the message names the option."""


@dataclass(frozen=True)
class ChunkConfig:
    """`--chunk-tokens`, `--chunk-overlap`, `--chunk-on`: windows of at most `tokens` tokens (prompt and special
    tokens counted), each starting `overlap` tokens before the previous one's end; `on` sentence cuts a window
    after its last sentence end, token at its last word boundary."""

    tokens: int
    overlap: int = 0
    on: str = "token"
    late: bool = False  # --late-chunking: the windows pooled from one pass over the text (late_chunking.py)

    def __post_init__(self):
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise ChunkConfigError(f"--chunk-tokens must be a positive integer, not {self.tokens!r}")
        if isinstance(self.overlap, bool) or not isinstance(self.overlap, int) or not 0 <= self.overlap < self.tokens:
            raise ChunkConfigError(f"--chunk-overlap must be from 0 to --chunk-tokens - 1 ({self.tokens - 1}), "
                                   f"not {self.overlap!r}")
        if self.on not in CHUNK_MODES:
            raise ChunkConfigError(f"--chunk-on must be one of {', '.join(CHUNK_MODES)}, not {self.on!r}")

    def settings(self) -> dict:
        """The options as job.json records them."""
        late = {"late_chunking": True} if self.late else {}
        return {"chunk_tokens": self.tokens, "chunk_overlap": self.overlap, "chunk_on": self.on} | late


@dataclass(frozen=True)
class TextWindows:
    """One text's windows. content_ids [T] int32: the text's tokens, no prompt, no special tokens; window w is
    content_ids[token_start[w]:token_end[w]] and text[char_start[w]:char_end[w]] (all four [W] int64)."""

    content_ids: np.ndarray
    token_start: np.ndarray
    token_end: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray

    def __len__(self) -> int:
        return len(self.token_start)


@dataclass(frozen=True)
class CutTexts:
    """The windows of a list of texts, end to end: window w is of texts[rows[w]], its `chunk`-th.

    rows [W] int64, chunk [W] int32, char_start / char_end [W] int64; texts: the windows' texts.
    token_ids [sum(lengths)] int32: each window's prompt + text, special tokens added, cut at N; lengths [W] int32.
    num_truncated: windows that the cut at N shortened.
    spans (late chunking): token_ids / lengths are D documents instead, and spans = (bounds [W, 2] int32, each
    window's [start, end) within its document; counts [D] int32, windows per document), as ArrayBatcher.add takes.
    """

    rows: np.ndarray
    chunk: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray
    texts: list[str]
    token_ids: np.ndarray
    lengths: np.ndarray
    num_truncated: int
    spans: tuple[np.ndarray, np.ndarray] | None = None

    def sequences(self) -> list[list[int]]:
        """Each window's token ids."""
        return [part.tolist() for part in np.split(self.token_ids, np.cumsum(self.lengths)[:-1])] if len(self.lengths) \
            else []


def cut_windows(offsets: np.ndarray, word_ids: np.ndarray, is_sentence_end: np.ndarray, budget: int, overlap: int,
                on: str = "token") -> tuple[np.ndarray, np.ndarray]:
    """Windows [token_start, token_end) of a text's T tokens, each at most `budget` tokens long.

    offsets [T, 2]: each token's (start, end) characters; word_ids [T] (-1: a token of no word);
    is_sentence_end [T] bool (read with on="sentence" only). A window ends at its last sentence end when
    that leaves it longer than `overlap` (on="sentence"), else at its last word boundary when it then
    holds a whole word, else mid-word; cuts fall only between tokens that share no character. The next
    starts `overlap` tokens before the end, moved forward to a word start when one is there, always after
    the previous start. Returns [W] int64 twice; a text of no tokens is one empty window.
    """
    num_tokens = len(offsets)
    if num_tokens <= budget:
        return np.zeros(1, np.int64), np.full(1, num_tokens, np.int64)
    cuts = Boundaries(offsets, word_ids, is_sentence_end if on == "sentence" else None)
    starts, ends, start = [], [], 0
    while True:
        end = num_tokens if start + budget >= num_tokens else cuts.end_of(start, start + budget, overlap)
        starts.append(start)
        ends.append(end)
        if end == num_tokens:
            return np.array(starts, np.int64), np.array(ends, np.int64)
        start = cuts.next_start(start, end, overlap)


def window_spans(offsets: np.ndarray, token_start: np.ndarray, token_end: np.ndarray,
                 text_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Each window's characters [char_start, char_end): from its first token's start (the first window: from 0)
    to the start of the token after it (the last window: to the text's end). [W] int64 twice."""
    num_tokens = len(offsets)
    if not num_tokens:
        return np.zeros(len(token_start), np.int64), np.full(len(token_start), text_length, np.int64)
    token_chars = np.append(offsets[:, 0], text_length).astype(np.int64)  # [T + 1]: where each token starts
    char_start = np.where(token_start == 0, 0, token_chars[token_start])
    return char_start, token_chars[token_end]


class WindowCutter:
    """Cuts the texts of one tokenizer and prompt into a ChunkConfig's windows, and tokenizes the windows.

    Raises ChunkConfigError when N is above the max length (the model's max_seq_length or --max-length), or
    leaves no more than the overlap for text once the special tokens and the prompt are counted.
    """

    def __init__(self, tokenizer_file: str, max_length: int, prompt: str, config: ChunkConfig):
        if config.tokens > max_length:
            raise ChunkConfigError(f"--chunk-tokens {config.tokens} is more than the max length {max_length} "
                                   "(the model's max_seq_length, or --max-length)")
        self.config, self.prompt = config, prompt
        self._content = Tokenizer.from_file(tokenizer_file)  # whole texts: no truncation, no padding
        self._content.no_truncation()
        self._content.no_padding()
        self._windows = Tokenizer.from_file(tokenizer_file)  # prompt + window text, the usual way, cut at N
        self._windows.no_padding()
        self._windows.enable_truncation(config.tokens)
        self._prefix, self._suffix = _special_tokens(self._content)
        self._prompt_ids = np.array(self._content.encode(prompt, add_special_tokens=False).ids if prompt else [],
                                    dtype=np.int32)
        num_special, num_prompt = len(self._prefix) + len(self._suffix), len(self._prompt_ids)
        self.budget = config.tokens - num_special - num_prompt  # content tokens per window
        if self.budget <= config.overlap:
            raise ChunkConfigError(
                f"--chunk-tokens {config.tokens} leaves {self.budget} tokens of text per window (the tokenizer adds "
                f"{num_special} special tokens, the prompt has {num_prompt}); it must leave more than "
                f"--chunk-overlap {config.overlap}")

    @classmethod
    def of(cls, tokenizer: TextTokenizer, config: ChunkConfig) -> WindowCutter:
        """The cutter of a tokenizer (with its prompt and max length), made once per process."""
        return _cutter(tokenizer.tokenizer_file, tokenizer.max_length, tokenizer.prompt, config)

    def special_tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids the tokenizer puts before and after every text ([CLS] and [SEP]; none and <|endoftext|>), int32."""
        return self._prefix, self._suffix

    def prompt_ids(self) -> np.ndarray:
        """The prompt's tokens on their own (no special tokens), int32: counted in every window's N."""
        return self._prompt_ids

    def windows(self, texts: list[str]) -> list[TextWindows]:
        """Each text's windows (its content tokens and their ranges); see cut_windows and window_spans."""
        # encode_batch releases the GIL; the content needs the offsets, so not encode_batch_fast
        encodings = self._content.encode_batch(texts, add_special_tokens=False)
        return [self._windows_of(text, encoding) for text, encoding in zip(texts, encodings)]

    def _windows_of(self, text: str, encoding: Encoding) -> TextWindows:
        content_ids = np.array(encoding.ids, dtype=np.int32)
        if len(content_ids) <= self.budget:  # one window, the whole text (cut_windows' answer, without the offsets)
            whole = np.zeros(1, np.int64)
            return TextWindows(content_ids, whole, whole + len(content_ids), whole, whole + len(text))
        offsets = np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        word_ids = np.array([-1 if word is None else word for word in encoding.word_ids], dtype=np.int64)
        ends = sentence_ends(text, offsets) if self.config.on == "sentence" else None
        token_start, token_end = cut_windows(offsets, word_ids, ends, self.budget, self.config.overlap,
                                             self.config.on)
        char_start, char_end = window_spans(offsets, token_start, token_end, len(text))
        return TextWindows(content_ids, token_start, token_end, char_start, char_end)

    def cut(self, texts: list[str]) -> CutTexts:
        """The windows of `texts`, end to end, with their token ids: what one index chunk embeds."""
        rows, chunk, char_start, char_end, window_texts = window_rows(texts, self.windows(texts))
        token_ids, lengths, num_truncated = self.encode(window_texts)
        return CutTexts(rows, chunk, char_start, char_end, window_texts, token_ids, lengths, num_truncated)

    def encode(self, window_texts: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
        """Flat int32 token ids of prompt + each window text (special tokens added, cut at N), lengths [W] int32,
        and how many were cut."""
        encode_batch = getattr(self._windows, "encode_batch_fast", self._windows.encode_batch)
        encodings = encode_batch([self.prompt + text for text in window_texts])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int32, count=len(encodings))
        token_ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int32, count=int(lengths.sum()))
        return token_ids, lengths, sum(bool(e.overflowing) for e in encodings)


def window_rows(texts: list[str], windows: list[TextWindows]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                        np.ndarray, list[str]]:
    """The windows of texts end to end, as CutTexts holds them: rows, chunk, char_start, char_end, texts."""
    counts = np.fromiter(map(len, windows), dtype=np.int64, count=len(windows))
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
    chunk = np.concatenate([np.arange(n, dtype=np.int32) for n in counts]) if len(texts) else np.empty(0, np.int32)
    char_start = np.concatenate([w.char_start for w in windows]) if windows else np.empty(0, np.int64)
    char_end = np.concatenate([w.char_end for w in windows]) if windows else np.empty(0, np.int64)
    window_texts = [texts[r][a:b] for r, a, b in zip(rows.tolist(), char_start.tolist(), char_end.tolist())]
    return rows, chunk, char_start, char_end, window_texts


def _special_tokens(whole_text: Tokenizer) -> tuple[np.ndarray, np.ndarray]:
    """(before, after): the special token ids around a text's own, from "a" encoded with and without them."""
    content, full = whole_text.encode("a", add_special_tokens=False).ids, whole_text.encode("a").ids
    at = next(i for i in range(len(full) - len(content) + 1) if full[i:i + len(content)] == content)
    return np.array(full[:at], dtype=np.int32), np.array(full[at + len(content):], dtype=np.int32)


@functools.lru_cache(maxsize=4)
def _cutter(tokenizer_file: str, max_length: int, prompt: str, config: ChunkConfig) -> WindowCutter:
    return WindowCutter(tokenizer_file, max_length, prompt, config)
