"""Writes that fail part-way (a full disk, a file size limit): a clear error naming the file, nothing
partial counted as done, no temporary file left, and the same command completes the job afterwards."""
from __future__ import annotations

import builtins
import errno
import itertools
import pathlib
import resource
import subprocess

import faiss
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from support.corpus import index_command, read_embeddings, variant_texts, write_corpus
from embedpipe.cli.main import app
from embedpipe.pipeline.output import faiss_index, sinks
from support.processes import FAST_ENV, assert_consistent

OPTIONS = ["--device", "cpu", "--rows-per-unit", "20", "--quiet"]
DISK_FULL = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")


def invoke(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def fail_on_call(original, call: int, error: BaseException, only=lambda *args: True):
    """`original`, raising `error` instead on its `call`-th call among those `only` selects."""
    calls = itertools.count(1)

    def wrapper(*args, **kwargs):
        if only(*args) and next(calls) == call:
            raise error
        return original(*args, **kwargs)
    return wrapper


FAULTS = {  # what fails -> (patch target, attribute, replacement maker, the file named, units done after)
    "unit file": (pq.ParquetWriter, "write_batch", lambda f: fail_on_call(f, 3, DISK_FULL), "embeddings/", 2),
    "unit file commit": (sinks, "commit_file",  # its fsync or rename: after the last row, before the record
                         lambda f: fail_on_call(f, 3, OSError(errno.ENOSPC, "No space left on device"),
                                                only=lambda temporary, final: final.parent.name == "embeddings"),
                         "embeddings/", 2),
    "manifest record": (pathlib.Path, "write_text",
                        lambda f: fail_on_call(f, 3, OSError(errno.ENOSPC, "No space left on device"),
                                               only=lambda path, *_: path.parent.name == "manifest"), "manifest/", 2),
    # a Flat index is written by build_index itself (faiss_index._write_flat_ip), other kinds by FAISS
    "Flat index": (faiss_index, "open", lambda _: open_failing_on_write(
        2, OSError(errno.ENOSPC, "No space left on device"), only=lambda path: ".index.faiss.tmp" in str(path)),
        "index.faiss", 4),
    "HNSW index": (faiss, "write_index", lambda f: fail_on_call(f, 1, RuntimeError(
        "Error in void faiss::write_index(...): Error: 'ret == (size * 4)' failed: write error in x: "
        "0 != 256 (No space left on device)")), "index.faiss", 4, ["--index-factory", "HNSW32"]),
}


class FailingWrites:
    """A file whose `call`-th write raises `error`."""

    def __init__(self, file, call: int, error: BaseException):
        self.file, self.calls, self.call, self.error = file, itertools.count(1), call, error

    def write(self, data):
        if next(self.calls) == self.call:
            raise self.error
        return self.file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def open_failing_on_write(call: int, error: BaseException, only):
    """builtins.open, but files opened for writing that `only` selects fail on their `call`-th write."""
    def wrapper(path, mode="r", *args, **kwargs):
        file = builtins.open(path, mode, *args, **kwargs)
        return FailingWrites(file, call, error) if "w" in mode and only(path) else file
    return wrapper


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_full_disk_fails_the_job_cleanly_and_a_rerun_completes(tmp_path, tiny_model, monkeypatch, fault):
    write_corpus(tmp_path / "in", variant_texts(80), num_files=2, row_group_size=20)  # 4 units
    args = [tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model, *OPTIONS]
    target, name, make, named_file, num_done, *options = FAULTS[fault]
    args += options[0] if options else []
    with monkeypatch.context() as patch:
        patch.setattr(target, name, make(getattr(target, name, None)), raising=False)
        result = invoke("index", *args)
    assert result.exit_code == 1, result.output
    assert f"cannot write {tmp_path / 'out'}/{named_file}" in result.stderr
    assert "No space left on device" in result.stderr and "run the same command again" in result.stderr
    assert "[Errno 28]" in result.stderr, result.stderr  # the HNSW write reported errno 5 (EIO)
    assert "Traceback" not in result.output
    assert len(assert_consistent(tmp_path / "out")) == num_done
    assert not (tmp_path / "out" / "index.faiss").exists()
    assert invoke("index", *args).exit_code == 0
    verified = invoke("verify", tmp_path / "out", "--input", tmp_path / "in")
    assert verified.exit_code == 0, verified.output


def limited(max_bytes: int):
    """For preexec_fn: files of the process may grow to max_bytes; a write past it fails with EFBIG."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))


@pytest.mark.slow
def test_real_write_failures_from_a_file_size_limit(tmp_path, tiny_model):
    """The kernel fails pyarrow's and FAISS's own writes (Python ignores SIGXFSZ, so a write gets EFBIG)."""
    (tmp_path / "in").mkdir()
    for name, rows in (("a", 20), ("b", 200), ("c", 200)):  # unit files of ~6, 52, 52 KB; the index ~108 KB
        table = pa.table({"id": [f"{name}{i}" for i in range(rows)], "text": variant_texts(rows)})
        pq.write_table(table, tmp_path / "in" / f"{name}.parquet")
    command = index_command(tmp_path / "in", "--output", tmp_path / "out", "--model", tiny_model, *OPTIONS)
    for max_kib, named_file, num_done in ((24, "embeddings/b.parquet", 1), (80, "index.faiss", 3)):
        result = subprocess.run(command, capture_output=True, text=True, env=FAST_ENV, timeout=300,
                                preexec_fn=limited(max_kib << 10))
        assert result.returncode == 1, result.stderr
        assert f"cannot write {tmp_path / 'out'}/{named_file}" in result.stderr and "File too large" in result.stderr
        assert len(assert_consistent(tmp_path / "out")) == num_done
        assert not (tmp_path / "out" / "index.faiss").exists()  # no partial index at its final name
    assert subprocess.run(command, env=FAST_ENV, timeout=300).returncode == 0
    assert read_embeddings(tmp_path / "out").num_rows == 420
    assert invoke("verify", tmp_path / "out", "--input", tmp_path / "in").exit_code == 0


@pytest.mark.parametrize("damage", ["truncated to half", "rows lost", "index.json corrupt", "index.faiss missing"])
def test_a_rerun_repairs_damaged_outputs(tmp_path, tiny_model, damage):
    """A truncated unit file or a corrupt index.json ended the re-run in a traceback (ArrowInvalid,
    JSONDecodeError); a unit file that lost rows and a missing index.faiss were taken as done."""
    write_corpus(tmp_path / "in", variant_texts(80), num_files=2, row_group_size=20)  # 4 units
    out = tmp_path / "out"
    args = ["index", tmp_path / "in", "--output", out, "--model", tiny_model, "--device", "cpu",
            "--rows-per-unit", "20"]
    assert invoke(*args).exit_code == 0
    unit = sorted((out / "embeddings").iterdir())[1]
    if damage == "truncated to half":
        unit.write_bytes(unit.read_bytes()[:unit.stat().st_size // 2])
    elif damage == "rows lost":
        pq.write_table(pq.read_table(unit).slice(0, 5), unit)
    elif damage == "index.json corrupt":
        (out / "index.json").write_text("{broken")
    else:
        (out / "index.faiss").unlink()
    assert invoke("verify", out).exit_code == 1
    result = invoke(*args)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    if damage in ("truncated to half", "rows lost"):
        assert f"1 done units were dropped to be redone: {unit}" in result.stderr, result.stderr
    verified = invoke("verify", out, "--input", tmp_path / "in")
    assert verified.exit_code == 0, verified.output
    assert read_embeddings(out).num_rows == 80 and faiss.read_index(str(out / "index.faiss")).ntotal == 80
