"""The `embedpipe embed` command, run as a user runs it."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from support.numerics import cosine


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "embedpipe.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_embed_prints_json_lines_equal_to_the_reference(minilm_reference):
    result = run_cli("embed", "hello world", "Ein kurzer Satz.", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["hello world", "Ein kurzer Satz."]
    ref = minilm_reference.encode([r["text"] for r in rows])
    assert cosine(np.array([r["embedding"] for r in rows]), ref).min() >= 0.9999


def test_embed_dim_and_dtype():
    result = run_cli("embed", "hello", "--dim", "64", "--dtype", "binary", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    vector = json.loads(result.stdout)["embedding"]
    assert len(vector) == 8 and all(0 <= v < 256 for v in vector)


def test_bad_model_exits_with_a_message_not_a_traceback(tmp_path):
    result = run_cli("embed", "hello", "--model", str(tmp_path))
    assert result.returncode == 2
    assert "config.json" in result.stderr and "Traceback" not in result.stderr


def test_unknown_prompt_name_is_an_error():
    result = run_cli("embed", "hello", "--prompt-name", "query", "--device", "cpu")
    assert result.returncode == 2 and "no prompt named 'query'" in result.stderr


def test_help_is_instant_and_lists_commands():
    start = time.perf_counter()
    result = run_cli("--help")
    assert result.returncode == 0 and "embed" in result.stdout
    probe = subprocess.run([sys.executable, "-c", "import sys, embedpipe.cli.main; print('torch' in sys.modules)"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == "False", "importing the CLI must not import torch"
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("command", [["embed", "hello"], ["warmup"]])
def test_a_setting_the_engine_refuses_is_a_one_line_usage_error(command):
    result = run_cli(*command, "--dim", "0", "--device", "cpu")
    assert result.returncode == 2 and "dim must be positive, not 0" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
