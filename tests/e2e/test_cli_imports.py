"""Commands that run no model import no torch, so they start at once: --help, merge and verify (a test
per command, each in a fresh process that reports what it imported)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from support.corpus import run_index, variant_texts, write_corpus

# runs the CLI's app in this process (not main(), which ends the process), then says whether torch came in
HARNESS = """
import sys
from embedpipe.cli.main import app
try:
    app(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
print("torch" in sys.modules, code)
"""


def imports_torch(*args) -> tuple[bool, int]:
    """(whether `embedpipe ARGS` imported torch, its exit code)."""
    done = subprocess.run([sys.executable, "-c", HARNESS, *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    torch, code = done.stdout.strip().splitlines()[-1].split()
    return torch == "True", int(code or 0)


@pytest.fixture(scope="module")
def output(tmp_path_factory, tiny_model):
    folder = tmp_path_factory.mktemp("no-torch")
    write_corpus(folder / "in", variant_texts(60), num_files=2, row_group_size=30)
    done = run_index(folder / "in", "--output", folder / "out", "--model", tiny_model, "--device", "cpu", "--quiet")
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.parametrize("command", [["--help"], ["merge", "--help"], ["verify", "--help"], ["index", "--help"]])
def test_help_imports_no_torch(command):
    assert imports_torch(*command) == (False, 0)


def test_merge_and_verify_import_no_torch(output):
    assert imports_torch("merge", output / "out", "--into", output / "merged") == (False, 0)
    assert (output / "merged" / "index.faiss").is_file()
    assert imports_torch("verify", output / "out", "--input", output / "in") == (False, 0)


def test_a_merge_of_a_missing_output_fails_without_torch(tmp_path):
    assert imports_torch("merge", tmp_path / "nothing", "--into", tmp_path / "index") == (False, 2)
