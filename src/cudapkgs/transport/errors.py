"""What a transfer can fail with: one `TransferError` hierarchy, importable without the HTTP stack."""

from __future__ import annotations

from ..errors import CudapkgsError

__all__ = ["DeadlineExceeded", "StatusError", "TooLarge", "TransferError"]


class TransferError(CudapkgsError):
    """A transfer of `url` failed; the message is one line, "<url>: <reason>[ (after N attempts)]".

    `url` is shown without credentials. `reason` is the message without the URL (for callers that
    word their own line, e.g. "cannot download <url>: <reason>"). `transient` says whether trying
    again may help (a timeout, a reset, a 5xx) or not (a 404, a name that does not resolve, a
    certificate not trusted, a bound exceeded). `attempts` is how many requests were made.
    """

    def __init__(self, url: str, reason: str, *, transient: bool = False, attempts: int = 1,
                 status: int | None = None) -> None:
        self.url = url
        self.reason = reason
        self.transient = transient
        self.attempts = attempts
        self.status = status
        super().__init__(f"{url}: {reason}{self.tries}")

    @property
    def tries(self) -> str:
        """" (after N attempts)" when more than one request was made, else ""."""
        return f" (after {self.attempts} attempts)" if self.attempts > 1 else ""

    def after(self, attempts: int) -> TransferError:
        """This error, saying it came after `attempts` requests."""
        self.attempts = attempts
        self.args = (f"{self.url}: {self.reason}{self.tries}",)
        return self


class StatusError(TransferError):
    """The server answered with a status the caller did not accept (`status`, e.g. 404 or 503)."""


class DeadlineExceeded(TransferError):
    """The object took longer than its deadline (the whole transfer, not one read)."""


class TooLarge(TransferError):
    """The server sent (or declared) more bytes than the caller allows for the object."""
