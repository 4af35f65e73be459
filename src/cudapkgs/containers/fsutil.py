"""Writing files atomically: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import os

from .errors import CdiError

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from os import PathLike

#: Flags of the temporary file: a new file only (never an existing one or a symlink's target).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create_temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file `.NAME.<random>.tmp` in `directory`, mode 0600: (descriptor, path).

    As `tempfile.mkstemp` does, without importing `tempfile` (`shutil`, `random`) on the
    start-up path of `cdi generate`.  Raises OSError (FileExistsError after 100 collisions).
    """
    for _ in range(100):
        path = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(path, _CREATE, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary file name in {directory}")


def atomic_write(path: str | PathLike[str], text: str, mode: int = 0o644) -> str:
    """Write `text` to `path` through a temporary file in the same directory, an fsync and a
    rename; returns `path` as a string.  Raises CdiError (one line) when it cannot."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = _create_temporary(directory, name)
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
