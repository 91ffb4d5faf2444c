"""Lazily captured CUDA graphs keyed by (padded tokens, padded sequences), plus what the
attention backend adds (`AttentionBackend.graph_key`).

The policy is device-free so it can be tested on the CPU: the first batch with a key runs
eagerly, the second captures a graph and replays it, later ones replay. Keys beyond the largest
bucket, or beyond the configured number of graphs, stay eager.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable


class Action(str, Enum):
    EAGER = "eager"
    CAPTURE = "capture"
    REPLAY = "replay"


@dataclass(frozen=True)
class GraphConfig:
    enabled: bool = True
    max_graphs: int = 64  # each graph keeps its static buffers; activations share one memory pool
    max_graph_tokens: int = 16384  # batches with more padded tokens run eagerly

    def __post_init__(self):
        if self.max_graphs < 0 or self.max_graph_tokens <= 0:
            raise ValueError("max_graphs must be >= 0 and max_graph_tokens > 0")


@dataclass
class GraphCounters:
    eager: int = 0
    captures: int = 0
    replays: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"eager_runs": self.eager, "graph_captures": self.captures, "graph_replays": self.replays}


@dataclass
class GraphCache:
    """Maps a key to its captured entry; decides what each batch does."""

    config: GraphConfig = field(default_factory=GraphConfig)
    entries: dict[Any, Any] = field(default_factory=dict)
    seen: set = field(default_factory=set)
    counters: GraphCounters = field(default_factory=GraphCounters)

    def action(self, key: tuple) -> Action:
        if key in self.entries:
            return Action.REPLAY
        capturable = (self.config.enabled and key[0] <= self.config.max_graph_tokens
                      and len(self.entries) < self.config.max_graphs)
        if capturable and key in self.seen:
            return Action.CAPTURE
        self.seen.add(key)
        return Action.EAGER

    def run(self, key, eager: Callable[[], Any], capture: Callable[[], Any], replay: Callable[[Any], Any]):
        """Runs the batch the policy's way; `capture` returns the entry to keep for the key."""
        action = self.action(key)
        if action is Action.EAGER:
            self.counters.eager += 1
            return eager()
        if action is Action.CAPTURE:
            self.entries[key] = capture()
            self.counters.captures += 1
        self.counters.replays += 1
        return replay(self.entries[key])
