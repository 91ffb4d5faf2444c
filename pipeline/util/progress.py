"""Job progress on stderr: a bar on a terminal, a log line every few seconds otherwise, nothing when quiet."""
from __future__ import annotations

import sys
import time
from datetime import timedelta

LOG_INTERVAL_S = 10.0


class Progress:
    """Counts rows (of `total_rows` when known) and tokens; shows rows, tokens/s and the ETA.

    done_rows: rows of the job done before this run (a resume): the bar starts there, of the whole total,
    and the rates and the ETA count this run's rows only."""

    def __init__(self, total_rows: int | None, quiet: bool = False, stream=None,
                 interval_s: float = LOG_INTERVAL_S, done_rows: int = 0):
        self.total_rows, self.quiet, self.interval_s, self.done_rows = total_rows, quiet, interval_s, done_rows
        self.stream = stream or sys.stderr
        self.num_rows = self.num_tokens = 0
        self.opened = self.start = self._last_log = time.perf_counter()  # start: the job clock's
        self._bar = self._task = None
        if not quiet and self.stream.isatty():
            try:
                self._start_bar()
            except ImportError:  # rich comes with typer; without it, log lines
                self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(TextColumn("rows"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[rate]}"), TextColumn("ETA"), TimeRemainingColumn(),
                        console=Console(file=self.stream), refresh_per_second=4)
        self._task = self._bar.add_task("index", total=self.total_rows, completed=self.done_rows, rate="")
        self._bar.start()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start

    def start_clock_at(self, start: float) -> None:
        """The job clock starts at `start` (perf_counter), not before this opened: for engines that a pipeline
        starts itself (Ray's actors), once the first was ready, as --devices' engines are before the clock.
        Call it before the rows it times are counted."""
        self.start = max(self.opened, start)

    def advance(self, rows: int = 0, tokens: int = 0) -> None:
        self.num_rows += rows
        self.num_tokens += tokens
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done_rows + self.num_rows,
                             rate=f"{self._tokens_per_s():,.0f} tokens/s")
        elif not self.quiet and time.perf_counter() - self._last_log >= self.interval_s:
            self._last_log = time.perf_counter()
            self.log(self.status())

    def _tokens_per_s(self) -> float:
        return self.num_tokens / max(self.seconds, 1e-9)

    def status(self) -> str:
        """One line: rows (of total), tokens/s, rows/s and the ETA when the total is known."""
        rows_per_s = self.num_rows / max(self.seconds, 1e-9)
        done = self.done_rows + self.num_rows
        line = f"{done:,}"
        if self.total_rows:
            line += f"/{self.total_rows:,} rows ({100 * done / self.total_rows:.0f}%)"
        else:
            line += " rows"
        line += f", {self._tokens_per_s():,.0f} tokens/s, {rows_per_s:,.0f} rows/s"
        if self.total_rows and rows_per_s > 0:
            left_s = max(self.total_rows - done, 0) / rows_per_s
            line += f", ETA {timedelta(seconds=round(left_s))}"
        return line

    def log(self, message: str) -> None:
        """A line on stderr (above the bar on a terminal); nothing when quiet."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(f"embedpipe: {message}", markup=False, highlight=False)
        else:
            print(f"embedpipe: {message}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
