"""`embedpipe verify`: options -> cli/commands.run_verify. Registered on the app in cli/main.py."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def verify(
    outputs: list[Path] = typer.Argument(
        ..., help="Output folders of one job: its OUTPUT, or the OUTPUTs of its shards."),
    index: Optional[Path] = typer.Option(
        None, "--index", help="Folder of the index (default: the first OUTPUT; after `merge --into DIR`, DIR)."),
    inputs: Optional[list[str]] = typer.Option(
        None, "--input", help="The job's inputs as given to index (repeat the option): also check that each input "
                              "row is in the output, or rejected, exactly once."),
):
    """Check an index job's output: units, files, vectors, index; exit code 0 only when every check holds."""
    from embedpipe.cli.commands import run_verify
    run_verify(outputs, index or outputs[0], inputs)
