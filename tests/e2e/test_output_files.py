"""Output files a team can rely on, through the CLI: modes under the umask, readable by another user."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from support.corpus import index_command, variant_texts, write_corpus
from support.processes import FAST_ENV


def index_under_umask(inputs: Path, output: Path, umask: int, *args) -> subprocess.CompletedProcess:
    return subprocess.run(index_command(inputs, "--output", output, "--device", "cpu", "--quiet", *args),
                          preexec_fn=lambda: os.umask(umask), env=FAST_ENV, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def shared_folder():
    """A folder every user may enter (pytest's tmp_path is its owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="embedpipe-shared-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("umask,expected", [(0o022, 0o644), (0o077, 0o600)])
def test_every_output_file_has_the_mode_the_umask_gives(tmp_path, umask, expected):
    write_corpus(tmp_path / "in", variant_texts(300), num_files=2, row_group_size=50)
    done = index_under_umask(tmp_path / "in", tmp_path / "out", umask)
    assert done.returncode == 0, done.stderr
    modes = {str(p.relative_to(tmp_path / "out")): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert {"index.faiss", "index.json", "index_ids.parquet", "job.json", "metrics.json"} <= set(modes)
    assert any(name.startswith("embeddings/") for name in modes)
    assert {name: oct(mode) for name, mode in modes.items() if mode != expected} == {}


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to run as another user")
def test_another_user_reads_every_file_of_a_job_run_under_umask_022(tmp_path, shared_folder):
    """`cat` as nobody (this test's Python may live where nobody may not go): every file's bytes, as written."""
    write_corpus(tmp_path / "in", variant_texts(200), num_files=1, row_group_size=50)
    done = index_under_umask(tmp_path / "in", shared_folder / "out", 0o022)
    assert done.returncode == 0, done.stderr
    files = sorted(p for p in (shared_folder / "out").rglob("*") if p.is_file())
    assert shared_folder / "out" / "index.faiss" in files
    for path in files:
        read = subprocess.run(["cat", str(path)], user="nobody", capture_output=True, timeout=60, cwd="/")
        assert read.returncode == 0, (path, read.stderr)
        assert read.stdout == path.read_bytes(), path
