"""The OUTPUT lock: one whole job at a time, shards of one job side by side, released however its holder ends."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from embedpipe.pipeline.output.lock import OutputLocked, output_lock


def test_one_job_at_a_time_and_the_refusal_names_the_holder(tmp_path):
    with output_lock(tmp_path):
        with pytest.raises(OutputLocked, match=r"is being written by another run \(pid \d+, started "):
            with output_lock(tmp_path):
                pass
        with pytest.raises(OutputLocked):
            with output_lock(tmp_path, shard=(0, 2)):
                pass
    with output_lock(tmp_path):  # released at the end of the block
        pass


def test_shards_of_one_job_share_the_output_but_each_runs_once(tmp_path):
    with output_lock(tmp_path, shard=(0, 2)), output_lock(tmp_path, shard=(1, 2)):
        with pytest.raises(OutputLocked, match=r"\(pid \d+"):
            with output_lock(tmp_path, shard=(1, 2)):
                pass
        with pytest.raises(OutputLocked, match="shards of a sharded job"):
            with output_lock(tmp_path):
                pass
        with output_lock(tmp_path, exclusive=False):  # verify reads while shards write
            pass


HOLDER = """
import sys, time
from pathlib import Path
from embedpipe.pipeline.output.lock import output_lock
with output_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(OutputLocked, match=f"pid {holder.pid}"):
            with output_lock(tmp_path):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with output_lock(tmp_path):  # the kernel dropped the dead process's lock
        pass


def test_merge_refuses_an_output_being_written_and_an_index_folder_in_use(tmp_path):
    """A merge reads the outputs (shared lock) and writes the index folder (exclusive): a job still
    writing an output, or another merge into the same folder, gets exit code 4 and nothing changes."""
    from typer.testing import CliRunner

    from embedpipe.cli.main import app
    shards = [tmp_path / "shard0", tmp_path / "shard1"]
    for shard in shards:
        shard.mkdir()
    merge = lambda *args: CliRunner().invoke(app, ["merge", *map(str, shards), *map(str, args)])
    with output_lock(shards[1]):  # a job is still writing shard1
        result = merge("--into", tmp_path / "index")
        assert result.exit_code == 4 and f"{shards[1]} is being written by another run" in result.stderr
    with output_lock(shards[0]):  # the default index folder is the first output
        assert merge().exit_code == 4
    with output_lock(tmp_path / "index"):  # another merge into the same folder
        assert merge("--into", tmp_path / "index").exit_code == 4
    assert list((tmp_path / "index").iterdir()) == [tmp_path / "index" / ".embedpipe.lock"]
    result = merge("--into", tmp_path / "index")  # unlocked: on to merging, which finds no output here
    assert result.exit_code == 2 and "Traceback" not in result.output
