"""Which CUDA attention backend `attention="auto"` runs, per attention shape and batch size.

`embedpipe warmup` times each backend on this machine (kernels/cuda/attention_timing.py) and
stores the fastest per batch size, among those whose graph replay equals their eager run, in a
table next to FlashInfer's JIT cache. An entry is keyed by the attention shape (heads, kv heads,
head_dim, causal, dtype) and holds only for the machine it was measured on (GPU, torch, FlashInfer,
this file's TABLE_VERSION). Without a valid entry, auto runs SAFE_DEFAULT, the kernel that runs
every shape, and the choice's note says why (jobs log it and record it in their metrics).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

SAFE_DEFAULT = "torch-varlen"
TABLE_VERSION = 2  # 2: a step timed with its host plan and a model's layers; the Triton kernel measured too
TABLE_FILE = "attention-choice.json"
ANY_SIZE = 1 << 62  # the bound of the last range
CLEAR_WIN = 0.95  # another backend's time must be at most this share of SAFE_DEFAULT's to replace it


@dataclass(frozen=True)
class AttentionChoice:
    """ranges: (most padded tokens, backend), increasing; the last range also covers larger batches."""

    ranges: tuple[tuple[int, str], ...]
    note: str

    @property
    def backends(self) -> list[str]:
        return sorted({backend for _, backend in self.ranges})

    def backend_for(self, num_tokens: int) -> str:
        for most, backend in self.ranges:
            if num_tokens <= most:
                return backend
        return self.ranges[-1][1]

    def describe(self) -> str:
        """"fa3" or "torch-varlen up to 1024 tokens, fa3 above", then the note."""
        if len(self.backends) == 1:
            return f"{self.ranges[0][1]} ({self.note})"
        parts = [f"{backend} up to {most} tokens" for most, backend in self.ranges[:-1]]
        return f"{', '.join(parts)}, {self.ranges[-1][1]} above ({self.note})"


def single_choice(backend: str, note: str) -> AttentionChoice:
    return AttentionChoice(((ANY_SIZE, backend),), note)


def default_choice(reason: str) -> AttentionChoice:
    return single_choice(SAFE_DEFAULT, reason)


def table_path() -> Path:
    """$EMBEDPIPE_CACHE_DIR/attention-choice.json, else ~/.cache/embedpipe/, beside FlashInfer's ~/.cache/flashinfer."""
    folder = os.environ.get("EMBEDPIPE_CACHE_DIR") or Path.home() / ".cache" / "embedpipe"
    return Path(folder) / TABLE_FILE


def shape_key(num_heads: int, num_kv_heads: int, head_dim: int, causal: bool, dtype: str) -> str:
    return f"heads{num_heads}/kv{num_kv_heads}/d{head_dim}/{'causal' if causal else 'bidirectional'}/{dtype}"


def ranges_from_timings(timings: dict[int, dict[str, float]]) -> tuple[tuple[int, str], ...]:
    """timings: {padded tokens: {backend: ms}} (only backends that passed) -> the fastest backend per measured
    size, each size's range reaching up to the geometric middle between it and the next size measured.
    Another backend replaces SAFE_DEFAULT only when at least CLEAR_WIN faster: BERT-base 1 x 128 measured
    fa3 6.69 us against 6.76 us, a difference below the noise between runs."""
    sizes = sorted(timings)
    fastest = [_fastest(timings[size]) for size in sizes]
    bounds = [int((a * b) ** 0.5) for a, b in zip(sizes, sizes[1:])] + [ANY_SIZE]
    ranges: list[tuple[int, str]] = []
    for bound, backend in zip(bounds, fastest):
        if ranges and ranges[-1][1] == backend:
            ranges[-1] = (bound, backend)  # one range for neighbours with the same winner
        else:
            ranges.append((bound, backend))
    return tuple(ranges)


def _fastest(ms: dict[str, float]) -> str:
    best = min(ms, key=ms.get)
    if SAFE_DEFAULT in ms and ms[best] > CLEAR_WIN * ms[SAFE_DEFAULT]:
        return SAFE_DEFAULT
    return best


def load_choice(machine: dict, shape: str, path: Path | None = None) -> AttentionChoice:
    """The stored choice for this shape on this machine, or SAFE_DEFAULT with the reason in its note."""
    path = path or table_path()
    advice = "run `embedpipe warmup` on this machine to measure"
    try:
        table = json.loads(path.read_text())
    except FileNotFoundError:
        return default_choice(f"no measured choice in {path}; {advice}")
    except (OSError, ValueError) as error:
        return default_choice(f"{path} cannot be read ({type(error).__name__}); {advice}")
    if not isinstance(table, dict) or table.get("machine") != {**machine, "table_version": TABLE_VERSION}:
        return default_choice(f"{path} was measured on another machine or version; {advice}")
    entry = table.get("shapes", {}).get(shape)
    try:
        ranges = tuple((int(most), str(backend)) for most, backend in entry["ranges"])
        measured = entry["measured_at"]
        if not ranges:
            raise ValueError("no ranges")
    except (TypeError, KeyError, ValueError):
        return default_choice(f"{path} holds no choice for {shape}; {advice}")
    return AttentionChoice(ranges, f"measured by embedpipe warmup at {measured}")


def store_choice(machine: dict, shape: str, timings: dict[int, dict[str, float]], failed: dict[str, str],
                 measured_at: str, path: Path | None = None) -> AttentionChoice:
    """Adds this shape's ranges (and its timings, and the backends that failed the check) to the table."""
    path = path or table_path()
    machine = {**machine, "table_version": TABLE_VERSION}
    try:
        table = json.loads(path.read_text())
        if not isinstance(table, dict) or table.get("machine") != machine:
            table = {}
    except (OSError, ValueError):
        table = {}
    ranges = ranges_from_timings(timings)
    shapes = table.get("shapes", {})
    shapes[shape] = {"ranges": [list(r) for r in ranges], "measured_at": measured_at,
                     "timings_ms": {str(size): ms for size, ms in timings.items()}, "failed": failed}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_text(json.dumps({"machine": machine, "shapes": shapes}, indent=1, sort_keys=True))
    temporary.replace(path)
    return AttentionChoice(ranges, f"measured by embedpipe warmup at {measured_at}")
