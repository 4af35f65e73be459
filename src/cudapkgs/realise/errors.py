"""Build failures, shared by the scheduler and its executors (local, Dask)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import CudapkgsError


class BuildError(CudapkgsError):
    """A builder failed; the message names the derivation and its log."""


class BuildFailed(BuildError):
    """One or more builds failed; `failures` holds each one's error (naming its log)."""

    def __init__(self, failures: Sequence[BuildError], skipped: int) -> None:
        self.failures = list(failures)
        self.skipped = skipped
        # One failure per line, each naming its log (the progress display said only "failed X").
        head = self.failures[0] if len(self.failures) == 1 else f"{len(self.failures)} builds failed:\n" + "\n".join(
            f"  {f}" for f in self.failures
        )
        tail = f" ({skipped} build(s) not started)" if skipped else ""
        super().__init__(f"{head}{tail}")
