"""Where the repository's folders are, for tests at any depth."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
DATA = TESTS / "data"
# source folder -> the package it is (pyproject's package-dir); embedpipe itself, the Python API, is pipeline/public
SOURCE_PACKAGES = {"pipeline/public": "embedpipe", "cli": "embedpipe.cli", "pipeline": "embedpipe.pipeline",
                   "kernels": "embedpipe.kernels"}


def source_modules() -> dict[str, Path]:
    """Every module of the source tree by its import name (a package by its own name)."""
    found = {}
    for folder, package in SOURCE_PACKAGES.items():
        inner = [REPO / other for other in SOURCE_PACKAGES if other.startswith(folder + "/")]
        for path in sorted((REPO / folder).rglob("*.py")):
            if "__pycache__" in path.parts or any(path.is_relative_to(other) for other in inner):
                continue  # another package's folder inside this one
            name = ".".join([package, *path.relative_to(REPO / folder).with_suffix("").parts])
            found[name.removesuffix(".__init__")] = path
    return found
