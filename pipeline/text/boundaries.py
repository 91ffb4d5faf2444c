"""Where a window of tokens may end and the next one start (chunking.cut_windows), in O(1) per window.

Positions are gaps between tokens: position p (0 to T) lies before token p. A cut is clean when token
p starts after token p - 1 started and at or after it ended: tokens that share a character (an emoji
of several byte tokens, a ligature expanded by the normalizer) are never split, so every window's
span holds whole characters and the spans' starts strictly increase.
"""
from __future__ import annotations

import numpy as np

# sentence ends; the Latin ones only before whitespace or the text's end ("3.14" and "e.g" hold no end)
LATIN_SENTENCE_ENDS = ".!?"
CJK_SENTENCE_ENDS = "。！？"
WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
             "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # what str.isspace() is true for


def code_points(chars: str) -> np.ndarray:
    return np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32)


def sentence_ends(text: str, offsets: np.ndarray) -> np.ndarray:
    """[T] bool: whether each token ends a sentence: its last character is . ! ? followed by whitespace or the
    text's end, or 。！？, or a newline follows it before the next token. offsets [T, 2]: str indices."""
    if not len(offsets):
        return np.zeros(0, np.bool_)
    chars = np.append(code_points(text), ord(" "))  # [len(text) + 1]: a space after the end
    starts, ends = offsets[:, 0], offsets[:, 1]
    last = np.where(ends > starts, chars[np.maximum(ends - 1, 0)], 0)
    latin = np.isin(last, code_points(LATIN_SENTENCE_ENDS)) & np.isin(chars[ends], code_points(WHITESPACE))
    cjk = np.isin(last, code_points(CJK_SENTENCE_ENDS))
    newlines = np.concatenate([[0], np.cumsum(chars == ord("\n"))])  # [len(text) + 2]: newlines before each index
    next_starts = np.append(starts[1:], len(text))
    newline_after = newlines[np.maximum(next_starts, ends)] > newlines[ends]
    return latin | cjk | newline_after


def _last_at_or_before(flags: np.ndarray) -> np.ndarray:
    """[n]: the largest q <= p with flags[q], else -1."""
    return np.maximum.accumulate(np.where(flags, np.arange(len(flags)), -1))


def _first_at_or_after(flags: np.ndarray) -> np.ndarray:
    """[n]: the smallest q >= p with flags[q], else n."""
    positions = np.where(flags, np.arange(len(flags)), len(flags))
    return np.minimum.accumulate(positions[::-1])[::-1]


class Boundaries:
    """The clean cuts of a text's T tokens, and those at word starts and after sentence ends, indexed [T + 1]."""

    def __init__(self, offsets: np.ndarray, word_ids: np.ndarray, is_sentence_end: np.ndarray | None = None):
        starts, ends = offsets[:, 0], offsets[:, 1]
        clean = np.ones(len(offsets) + 1, np.bool_)  # the text's start and end are always cuts
        clean[1:-1] = (starts[1:] > starts[:-1]) & (starts[1:] >= ends[:-1])
        word_start = np.ones(len(offsets) + 1, np.bool_)
        word_start[1:-1] = (word_ids[1:] != word_ids[:-1]) | (word_ids[1:] < 0)
        self.word_start = clean & word_start
        self.last_clean, self.first_clean = _last_at_or_before(clean), _first_at_or_after(clean)
        self.last_word, self.first_word = _last_at_or_before(self.word_start), _first_at_or_after(self.word_start)
        self.last_sentence = None
        if is_sentence_end is not None:
            after_end = np.concatenate([[False], is_sentence_end]) & clean
            self.last_sentence = _last_at_or_before(after_end)

    def end_of(self, start: int, limit: int, overlap: int) -> int:
        """The end of the window that starts at `start` and may reach `limit` (< T): after its last sentence end
        when that leaves it longer than the overlap, else at its last word start when it then holds a whole word,
        else its last clean cut; past `limit` only when it has none (the cut at N then shortens it)."""
        if self.last_sentence is not None and self.last_sentence[limit] - start > overlap:
            return int(self.last_sentence[limit])
        word = self.last_word[limit]
        if word > start and (self.word_start[start] or self.last_word[word - 1] > start):
            return int(word)
        clean = self.last_clean[limit]
        return int(clean) if clean > start else int(self.first_clean[limit + 1])

    def next_start(self, start: int, end: int, overlap: int) -> int:
        """Where the window after [start, end) starts: `overlap` tokens before `end`, moved forward to a word
        start when one lies before `end` (inclusive), and after `start` (progress)."""
        low = max(end - overlap, start + 1)
        word = self.first_word[low]
        return int(word) if word <= end else int(self.first_clean[low])
