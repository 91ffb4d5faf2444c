"""`pip install .` (a wheel, not the editable install the tests run from) ships every package of the
source tree, and its `embedpipe` command is the CLI's main()."""
from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from support.paths import REPO

ROOT = REPO
SOURCE_FOLDERS = {"cli": "embedpipe/cli", "pipeline": "embedpipe/pipeline", "kernels": "embedpipe/kernels"}


@pytest.mark.slow
def test_the_wheel_ships_every_package_and_module(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True, timeout=600)
    wheel = zipfile.ZipFile(next(tmp_path.glob("embedpipe-*.whl")))
    shipped = set(wheel.namelist())
    expected = {f"{installed}/{path.relative_to(ROOT / folder)}" for folder, installed in SOURCE_FOLDERS.items()
                for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts}
    assert not expected - shipped, f"missing from the wheel: {sorted(expected - shipped)}"
    entry_points = next(name for name in shipped if name.endswith("entry_points.txt"))
    assert "embedpipe = embedpipe.cli.main:main" in wheel.read(entry_points).decode()
