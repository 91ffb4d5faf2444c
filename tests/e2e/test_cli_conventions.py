"""The command line's conventions: --version, -h, texts from standard input or a file, plain help without metavars
on flags, one --device syntax everywhere, and --help without torch."""
import json
import subprocess
import sys

import numpy as np
import pytest

from support.numerics import cosine


def run_cli(*args, input=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *map(str, args)], capture_output=True,
                          text=True, input=input, timeout=timeout)


def vectors(stdout: str) -> tuple[list[str], np.ndarray]:
    rows = [json.loads(line) for line in stdout.splitlines()]
    return [row["text"] for row in rows], np.array([row["embedding"] for row in rows])


def test_version_and_short_help():
    from importlib.metadata import version
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"embedpipe {version('embedpipe')}"
    for args in (["-h"], ["index", "-h"], ["serve", "-h"]):
        result = run_cli(*args)
        assert result.returncode == 0 and "Usage: " in result.stdout, result.stderr


def test_embed_reads_texts_from_standard_input_and_from_files(tmp_path):
    texts = ["hello world", "Ein kurzer Satz.", "a third one"]
    from_args = run_cli("embed", *texts, "--device", "cpu")
    assert from_args.returncode == 0, from_args.stderr
    _, want = vectors(from_args.stdout)
    (tmp_path / "texts.txt").write_text(texts[0] + "\n\n" + "\n".join(texts[1:]) + "\n")  # a blank line is skipped
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    for args, stdin in ((["-"], "\n".join(texts) + "\n"),  # `embed -` embedded the literal "-"
                        (["--input-file", "-"], "\n".join(texts)),
                        (["--input-file", tmp_path / "texts.txt"], None),
                        (["-i", tmp_path / "texts.jsonl"], None)):
        result = run_cli("embed", *args, "--device", "cpu", input=stdin)
        assert result.returncode == 0, (args, result.stderr)
        got_texts, got = vectors(result.stdout)
        assert got_texts == texts and cosine(got, want).min() >= 0.99999, args


@pytest.mark.parametrize("args, message", [
    (["embed"], "nothing to embed: give texts, - (standard input) or --input-file FILE"),
    (["embed", "x", "--input-file", "/no/such"], "give texts or --input-file, not both"),
    (["embed", "--input-file", "/no/such/file"], "cannot read /no/such/file: No such file or directory"),
    (["embed", "--device", "tpu", "x"], "--device must be auto, cpu, cuda or cuda:N, not 'tpu'"),
])
def test_embed_usage_errors_are_one_line(args, message):
    result = run_cli(*args)
    assert result.returncode == 2 and result.stderr.strip() == f"embedpipe: error: {message}", result.stderr


def test_a_jsonl_line_without_text_is_named(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"text": "a"}\n{"title": "b"}\n')
    result = run_cli("embed", "--input-file", tmp_path / "t.jsonl")
    assert result.returncode == 2
    assert result.stderr.strip() == (f'embedpipe: error: {tmp_path / "t.jsonl"}, line 2: not a JSON object with a '
                                     'string "text" field')


def test_help_is_plain_text_flags_have_no_metavar_and_brackets_survive():
    """Rich markup printed `--quiet <bool>` (so `--quiet true` looked right, and made `true` an input path) and
    swallowed "[ray]" in `pip install 'embedpipe[ray]'`."""
    help_text = run_cli("index", "--help").stdout
    assert "<bool>" not in help_text and "embedpipe[ray]" in help_text
    assert any(line.strip().startswith("-q, --quiet ") for line in help_text.splitlines())


@pytest.mark.parametrize("command", [["embed", "x"], ["index", "in", "--output", "out"], ["warmup"],
                                     ["query", "x", "--index", "out"], ["serve", "--port", "1"]])
def test_every_command_takes_cuda_n_as_its_device(tmp_path, command):
    """index and embed listed --device auto|cpu|cuda while serve took cuda:N."""
    result = run_cli(*command, "--device", "cuda:7")
    assert "--device must be" not in result.stderr and "Invalid value" not in result.stderr, result.stderr
    bad = run_cli(*command, "--device", "gpu0")
    assert bad.returncode == 2 and "--device must be auto, cpu, cuda or cuda:N, not 'gpu0'" in bad.stderr


def test_help_imports_no_torch():
    code = ("import sys\nfrom embedpipe.cli.main import app\ntry:\n    app(['index', '--help'])\nexcept SystemExit:\n"
            "    pass\nprint('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip().endswith("False"), result.stdout + result.stderr
