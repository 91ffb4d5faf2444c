"""`pip install .` (a wheel, not the editable install the tests run from) ships every package of the
source tree, and its `embedpipe` command is the CLI's main()."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from support.paths import REPO, source_modules

ROOT = REPO


def wheel_path(name: str, path) -> str:
    """Where a module of the source tree lies in the wheel: embedpipe/pipeline/api.py, embedpipe/__init__.py."""
    return "/".join(name.split(".")) + ("/__init__.py" if path.name == "__init__.py" else ".py")


@pytest.mark.slow
def test_the_wheel_ships_every_package_and_module(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=600)
    wheel = zipfile.ZipFile(next(tmp_path.glob("embedpipe-*.whl")))
    shipped = set(wheel.namelist())
    expected = {wheel_path(name, path) for name, path in source_modules().items()}
    assert not expected - shipped, f"missing from the wheel: {sorted(expected - shipped)}"
    stale = {name for name in shipped if name.endswith(".py")} - expected  # e.g. from an old build/ folder
    assert not stale, f"the wheel ships modules the source no longer has: {sorted(stale)}"
    entry_points = next(name for name in shipped if name.endswith("entry_points.txt"))
    assert "embedpipe = embedpipe.cli.main:main" in wheel.read(entry_points).decode()


INSTALLED_CHECK = """
import importlib, json, sys
names = json.loads(sys.argv[1])
for name in names:
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.argv[2]), (name, module.__file__)
print(len(names))
"""


@pytest.mark.slow
def test_the_installed_wheel_imports_every_package_from_itself(tmp_path):
    """`pip install` of the wheel (not -e): every package imports from the installed copy, and its
    `embedpipe` command runs."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "wheel"), str(ROOT)], check=True, capture_output=True, timeout=600)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                    str(next((tmp_path / "wheel").glob("embedpipe-*.whl")))], check=True, capture_output=True,
                   timeout=600)
    packages = sorted(name for name, path in source_modules().items() if path.name == "__init__.py")
    env = {**os.environ, "PYTHONPATH": str(site)}  # ahead of the editable install's finder
    checked = subprocess.run([sys.executable, "-c", INSTALLED_CHECK, json.dumps(packages), str(site)], env=env,
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert int(checked.stdout) == len(packages) >= 16 and "embedpipe" in packages
    command = subprocess.run([str(site / "bin" / "embedpipe"), "--help"], env=env, capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert command.returncode == 0 and "index" in command.stdout, command.stderr
