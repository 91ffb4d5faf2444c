"""Progress: counts from where a resumed job stands, and the job's summary is its last line."""
from __future__ import annotations

import io
import time

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from embedpipe.cli.main import app
from embedpipe.pipeline.util.progress import Progress
from support.corpus import variant_texts


class LogStream(io.StringIO):
    def isatty(self):
        return False  # log lines, not the bar: their text is what the bar shows too


def test_a_resumed_job_counts_from_its_done_rows_of_the_whole_total():
    stream = LogStream()
    progress = Progress(1200, stream=stream, interval_s=0.0, done_rows=200)
    progress.advance(rows=100, tokens=1000)
    assert progress.status().startswith("300/1,200 rows (25%)")
    assert "300/1,200 rows" in stream.getvalue()


def test_the_summary_is_the_last_line_and_a_resume_starts_at_the_done_rows(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": list(range(40)), "text": variant_texts(40)}), tmp_path / "in" / "a.parquet",
                   row_group_size=10)
    run = ["index", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--device", "cpu", "--workers", "0",
           "--rows-per-unit", "10"]
    first = CliRunner().invoke(app, run)
    assert first.exit_code == 0 and first.stderr.strip().splitlines()[-1].startswith("embedpipe: embedded 40 rows")
    (tmp_path / "out" / "manifest").joinpath(sorted(p.name
                                                    for p in (tmp_path / "out" / "manifest").iterdir())[0]).unlink()
    resumed = CliRunner().invoke(app, run)
    assert resumed.exit_code == 0 and "3 already done, 1 to do" in resumed.stderr
    assert resumed.stderr.strip().splitlines()[-1].startswith("embedpipe: embedded 10 rows")


def test_the_job_clock_starts_when_the_engines_were_ready_never_before_it_opened():
    progress = Progress(None, quiet=True)
    progress.start_clock_at(progress.opened - 5.0)  # an actor ready before the job (a reused cluster's)
    assert progress.start == progress.opened
    progress.start_clock_at(time.perf_counter() + 0.2)  # Ray's engine actor, ready after the clock had started
    assert progress.seconds < 0.0 < progress.start - progress.opened  # no row counted yet: the clock starts there
