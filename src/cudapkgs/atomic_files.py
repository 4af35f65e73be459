"""Files written whole or not at all, in directories cudapkgs does not own.

A file cudapkgs writes next to a user's file (``cudapkgs.lock``, ``export -o F``, ``--draw F``, a
CDI spec, a cache record) is first written to a temporary file in the same directory, then renamed
over the target.  The temporary file's name is random (``.NAME.<24 hex digits>.tmp``) and it is
created with ``O_CREAT|O_EXCL|O_NOFOLLOW``: a name that exists, a symbolic link or a hard link
planted there (a cloned repository can carry one per predictable name, ``.cudapkgs.lock.<pid>.tmp``)
is never opened, so nothing outside is truncated or written.  Before the rename the temporary name
must still be the file that was written (same device and inode, a regular file), so the rename
never puts anything else in the target's place.  As ``tempfile.mkstemp`` (CPython's
``Lib/tempfile.py``: ``_mkstemp_inner`` uses the same flags), without importing ``tempfile``
(``shutil``, ``random``) on start-up paths.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up paths: `cdi generate`, a build)
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["atomic_output", "create_temporary", "open_kept", "replace_checked", "write_atomically"]

#: A new regular file only: never an existing name, never through a symbolic link.
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_temporary(target: str | os.PathLike[str], mode: int = 0o600) -> tuple[int, str]:
    """A new empty file beside `target`, ``<dir>/.<name>.<random>.tmp`` with permission bits `mode`
    (less the umask): (open descriptor for writing, its path).

    Raises OSError (FileExistsError after 100 names taken, which random names make unlikely).
    """
    directory, name = os.path.split(os.path.abspath(os.fspath(target)))
    for _ in range(100):
        path = os.path.join(directory, f".{name[:200]}.{os.urandom(12).hex()}.tmp")
        try:
            return os.open(path, CREATE_FLAGS, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary file name beside {target}")


def replace_checked(fd: int, tmp: str, target: str | os.PathLike[str]) -> None:
    """Rename `tmp` (created by `create_temporary`, still open as `fd`) over `target`.

    Raises OSError (EEXIST's kin ``FileExistsError``) when the name `tmp` no longer is the file
    behind `fd`, a regular file: what takes the target's place is what was written, never a link
    or another file put there meanwhile.  A target that is a directory stays (``os.replace``
    refuses); a target that is a symbolic link is replaced by the file, never followed.
    """
    mine, now = os.fstat(fd), os.lstat(tmp)
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
        raise FileExistsError(f"{tmp} was replaced while it was written")
    os.replace(tmp, target)


class atomic_output:  # noqa: N801 (used as a function: ``with atomic_output(target) as handle``)
    """A binary file to write `target`'s new contents to; on leaving the block without an exception it
    is flushed, fsynced (unless `sync` is false), given permission bits `mode` (None: 0666 less the
    umask, as ``open(target, "w")`` would) and renamed over `target` (`replace_checked`); on an
    exception it is removed and `target` is left as it was.

    Raises OSError from creating, writing or renaming (the temporary file is removed then too).
    """

    def __init__(self, target: str | os.PathLike[str], mode: int | None = None, *, sync: bool = True) -> None:
        self.target, self.mode, self.sync = target, mode, sync

    def __enter__(self) -> BinaryIO:
        self._fd, self._tmp = create_temporary(self.target, 0o666 if self.mode is None else 0o600)
        try:
            self._handle = os.fdopen(os.dup(self._fd), "wb")
        except BaseException:
            self._discard()
            raise
        return self._handle

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if kind is None:
                self._handle.flush()
                if self.sync:
                    os.fsync(self._handle.fileno())
            self._handle.close()
            if kind is None:
                if self.mode is not None:
                    os.fchmod(self._fd, self.mode)
                replace_checked(self._fd, self._tmp, self.target)
                os.close(self._fd)
                return
        except BaseException:
            self._discard()
            raise
        self._discard()

    def _discard(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


def write_atomically(target: str | os.PathLike[str], data: bytes | str, mode: int | None = None, *,
                     sync: bool = True) -> None:
    """Write `data` (text is encoded as UTF-8) to `target` all or nothing, as `atomic_output` does.

    Raises OSError; `target` is then unchanged and no temporary file is left.
    """
    with atomic_output(target, mode, sync=sync) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)


def open_kept(path: str | os.PathLike[str], *, append: bool) -> BinaryIO:
    """Open the file at `path` for writing, creating it when missing: appended to (`append`, a ``.part``
    download resumed) or emptied first (a build log), for a file that must keep its name between runs.

    Never through a symbolic link (``O_NOFOLLOW``), never blocking on a FIFO (``O_NONBLOCK``), and
    only a regular file with no other hard link (checked with ``fstat`` before anything is emptied or
    written: ``O_TRUNC`` would empty a host file hard-linked there).  Raises OSError otherwise.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_APPEND if append else 0)
    fd = os.open(path, flags, 0o644)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise OSError(f"{os.fspath(path)}: not a regular file of its own (another hard link, or a FIFO or device "
                          "put there); remove it")
        if not append:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
