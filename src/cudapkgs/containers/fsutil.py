"""Writing files atomically (a reader sees the old file or the new one, never half of one), and
reading the small text files of a driver host (/proc, /sys) without trusting them."""

from __future__ import annotations

import os
import stat

from .errors import CdiError

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from os import PathLike

#: The most `read_small_text` reads (bytes): /proc/driver/nvidia files are a few hundred bytes.
SMALL_TEXT_LIMIT = 64 << 10

def atomic_write(path: str | PathLike[str], text: str, mode: int = 0o644) -> str:
    """Write `text` to `path` through a temporary file in the same directory (a random name, created
    with ``O_EXCL|O_NOFOLLOW``: `cudapkgs.atomic_files`), an fsync and a rename; returns `path` as a
    string.  Raises CdiError (one line) when it cannot."""
    from ..atomic_files import write_atomically

    path = os.fspath(path)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
        write_atomically(path, text, mode)
    except OSError as error:
        raise CdiError(f"cannot write {path}: {error.strerror or error}") from None
    return path


def read_small_text(path: str, limit: int = SMALL_TEXT_LIMIT) -> str:
    """The text of the regular file `path` (at most `limit` bytes; invalid UTF-8 replaced).

    A driver host's /proc and /sys are read as hostile: the file is opened without blocking
    and must be a regular file by its descriptor (a FIFO planted as a GPU's `information`
    hung `cdi generate`, a link to /dev/zero filled memory), and a file longer than `limit`
    is refused. procfs files are regular files of size 0 that read normally. Raises OSError
    (its message says why) for anything else, as a missing file does.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path} is larger than {limit} bytes")
    return data.decode("utf-8", errors="replace")
