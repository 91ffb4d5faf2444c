"""What `embedpipe verify` found: one line per check."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Report:
    """The checks' outcomes in order: ("ok" | "FAIL" | "warn", message)."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    def check(self, passed: bool, ok: str, failed: str) -> None:
        self.lines.append(("ok", ok) if passed else ("FAIL", failed))

    def warn(self, message: str) -> None:
        self.lines.append(("warn", message))

    @property
    def passed(self) -> bool:
        return all(status != "FAIL" for status, _ in self.lines)
