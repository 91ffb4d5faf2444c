"""The two kinds of error the library raises for its callers to act on; the CLI maps each to an exit code.

Every typed error of pipeline/ derives from one of them (and keeps the builtin base it had, so
`except ValueError` still catches a ConfigError). Kernels' ModelLoadError is the one outside: the
kernels import nothing from pipeline/, and the CLI counts it with the UserErrors.
"""
from __future__ import annotations


class UserError(Exception):
    """Something the user can fix: a setting, an input, an output folder, an index (exit code 2)."""


class JobFault(Exception):
    """The machine failed the work, not its input: a worker or engine process died, a text does not fit
    the device, a write failed (exit code 1); a job's completed units are kept."""


def one_line(error: BaseException) -> str:
    """An error's message on one line (pyarrow's and FAISS's span several), or its type's name when it has none."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
