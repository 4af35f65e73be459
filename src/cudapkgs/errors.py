"""The exceptions cudapkgs raises.

Every error a user can cause is a `CudapkgsError`; the command line prints its
message on one line and exits 1 (2 for `UsageError`), never a traceback. The ones the evaluation language raises are defined in
`cudapkgs.lib.errors` (lib/ imports nothing outside itself) and are the same classes here.
"""

from __future__ import annotations

from .lib.errors import (
    AttributeMissingError,
    CudapkgsError,
    EvalError,
    InfiniteRecursionError,
    MissingArgumentError,
    UsageError,
    did_you_mean,
)


class ConfigError(CudapkgsError):
    """The configuration (TOML file, --set, CUDAPKGS_CONFIG) is invalid."""


class ManifestError(CudapkgsError):
    """An NVIDIA redistrib manifest is missing, unreadable or malformed."""


class FailedAssertionsError(EvalError):
    """Evaluation assertions (Nixpkgs' `assertMsg` lists) failed.

    The message is Nixpkgs' (`_mkFailedAssertionsString`): a header line, then one
    "- message" line per failed assertion.  ``hint``, when given, says what would pass;
    the command line prints both on one line (`cli_message`).
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def cli_message(self) -> str:
        """`header item; item (hint)`: the failed assertions on one line."""
        header, *items = str(self).split("\n")
        text = f"{header} {'; '.join(item.removeprefix('- ') for item in items)}".strip()
        return f"{text} ({self.hint})" if self.hint else text


class UnfreeLicenseError(EvalError):
    """A package with an unfree license was used without permission."""


class UnavailablePackageError(EvalError):
    """A package cannot be used here (platform, broken, missing from a manifest)."""


class FetchError(CudapkgsError):
    """A source archive could not be fetched (network, mirror, pip).

    ``reasons``: when every one of several sources failed, each source's reason ("<source>: <why>"),
    so that a caller combining its own attempts can list them once instead of nesting messages.
    """

    reasons: tuple[str, ...] = ()


class HashMismatchError(FetchError):
    """A fetched file's sha256 (or size) differs from the manifest's; nothing was kept."""

    def __init__(self, message: str, *, file: str = "", expected: str = "", actual: str = "") -> None:
        super().__init__(message)
        self.file = file
        self.expected = expected
        self.actual = actual


class StoreError(CudapkgsError):
    """The store refused an operation: a path not in it, an invalid path, no space, no permission."""
