"""Where one request's time went, phase by phase: TEI's x-*-time response headers and the phase histograms.

TEI sends whole milliseconds; these are milliseconds with 3 decimals, as a request's phases here often take
well under one (a short text's parse and encode: tens of microseconds).
"""
from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class RequestTimes:
    """Seconds per phase of one request, filled in as it runs (the rest of its total: reading the body,
    admission, the hops between threads and processes)."""

    parse: float = 0.0  # the body's JSON to a checked request
    tokenize: float = 0.0  # texts to token ids (token-id inputs: cut to the limit)
    queue: float = 0.0  # submitted to the engine until its first batch was launched
    inference: float = 0.0  # that launch until its last row was back
    encode: float = 0.0  # vectors to the response's bytes (Matryoshka shortening included)
    search: float | None = None  # /v1/search: queries in the index's form and the index search
    num_tokens: int = 0  # x-compute-tokens: tokens embedded, prompts and special tokens included
    num_chars: int = 0  # x-compute-characters: characters of the texts (token-id inputs: their ids)

    def phases(self) -> tuple[float, float, float, float]:
        """(parse, tokenize, inference, encode) seconds, for Metrics.answered (queue is observed by the engine)."""
        return self.parse, self.tokenize, self.inference, self.encode

    def headers(self, total: float) -> dict[str, str]:
        """The response headers of a request that took `total` seconds from arrival."""
        headers = {"x-total-time": ms(total), "x-parse-time": ms(self.parse), "x-tokenization-time": ms(self.tokenize),
                   "x-queue-time": ms(self.queue), "x-inference-time": ms(self.inference),
                   "x-encode-time": ms(self.encode), "x-compute-tokens": str(self.num_tokens),
                   "x-compute-characters": str(self.num_chars)}
        if self.search is not None:
            headers["x-search-time"] = ms(self.search)
        return headers


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def lap(start: float) -> tuple[float, float]:
    """(seconds since start, now): one phase's time and the next phase's start."""
    now = time.perf_counter()
    return now - start, now
