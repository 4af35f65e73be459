"""Writing files atomically: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import CdiError


def atomic_write(path: str | Path, text: str, mode: int = 0o644) -> Path:
    """Write `text` to `path` through a temporary file in the same directory and a rename."""
    path = Path(path)
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise CdiError(f"cannot write {path}: {error.strerror or error}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CdiError(f"cannot write {path}: {error.strerror or error}") from None
    return path
