"""The error every setup hook raises (each hook module adds its own subclass where a caller needs one)."""

from __future__ import annotations

from ..errors import CudapkgsError

__all__ = ["FixupError"]


class FixupError(CudapkgsError):
    """A setup hook (fix-up, output split or check) failed; the message names the file or output."""
