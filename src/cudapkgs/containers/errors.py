"""Errors of the `cdi` commands (all `CudapkgsError`s: one line, no traceback)."""

from __future__ import annotations

from ..errors import CudapkgsError


class CdiError(CudapkgsError):
    """A CDI operation failed (bad spec, unwritable output, hook failure)."""


class NoGpuError(CdiError):
    """No NVIDIA GPU or driver was found on this machine."""
