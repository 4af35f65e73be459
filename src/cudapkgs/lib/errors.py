"""The errors of the evaluation language (re-exported by `cudapkgs.errors`, where the others are).

Every error a user can cause is a `CudapkgsError`; the command line prints its message on
one line and exits 1 (2 for a usage error), never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class CudapkgsError(Exception):
    """Base class of every error cudapkgs reports to users."""

    exit_code = 1

    def cli_message(self) -> str:
        """What the command line prints after "cudapkgs: error: " (by default the message)."""
        return str(self)


class UsageError(CudapkgsError):
    """The command line was used wrongly (exit status 2)."""

    exit_code = 2


class EvalError(CudapkgsError):
    """Evaluating the package tree failed."""


class InfiniteRecursionError(EvalError):
    """An attribute depends on itself; the message names the cycle."""


class AttributeMissingError(EvalError, AttributeError):
    """An attribute path names something that does not exist."""


class MissingArgumentError(EvalError):
    """`call_package` could not supply a required argument."""


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest candidates, or ''."""
    import difflib

    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f'"{c}"' for c in close) + "?)"
