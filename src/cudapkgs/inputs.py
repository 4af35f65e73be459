"""Reading files a user names (configs, derivation files, archives, manifests) as hostile input.

A FIFO or a character device named as a file argument would block forever or never
end (``/dev/zero``); a directory gives a confusing ``IsADirectoryError``.  Every file
argument goes through `check_regular_file` (or `read_input_file`, which also caps
the size), which refuses anything but a regular file at once, with one line.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from .errors import CudapkgsError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["InputFileError", "MAX_INPUT_BYTES", "check_regular_file", "file_kind", "open_cached", "parse_decimal",
           "read_cached", "read_input_file", "open_regular"]

#: The most a configuration or derivation file may hold (bytes); far above any real one.
MAX_INPUT_BYTES = 64 << 20

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class InputFileError(CudapkgsError):
    """A file argument is missing, unreadable, not a regular file, or too large.

    `reason` is the message without the file's name, for callers that name it themselves.
    """

    def __init__(self, what: str, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{what} {os.fspath(path)}: {reason}")
        self.reason = reason


def file_kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, for a message: "a FIFO", "a directory", … ("not a regular file" otherwise)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


_kind = file_kind


def check_regular_file(path: str | os.PathLike[str], *, what: str = "file") -> None:
    """Raise `InputFileError` unless `path` (symlinks followed) is an existing regular file."""
    try:
        st = os.stat(path)
    except OSError as error:
        raise InputFileError(what, path, error.strerror or str(error)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(what, path, f"is {_kind(st.st_mode)}, not a regular file; refusing to read it")


def _refusal(message: str) -> OSError:
    """An OSError (EINVAL) whose str() is `message` alone, as callers show it."""
    error = OSError(message)
    error.errno = errno.EINVAL
    return error


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True, dir_fd: int | None = None,
                 blocking: bool = False) -> int:
    """A read-only descriptor of the regular file `path`; nothing else is ever opened.

    The file is ``stat``-ed first (through links unless `follow_links` is false) and opened only
    when that says it is a regular file; then with ``O_NONBLOCK`` and ``O_NOCTTY`` (and
    ``O_NOFOLLOW`` unless `follow_links`), and its descriptor must be the same regular file (device
    and inode). Opening a device has effects of its own (a serial port's DTR line resets the board
    on it, a watchdog starts, a tty can become the controlling terminal, a FIFO's waiting writer is
    let through), and a cloned repository can make any name a link to one: a ``cudapkgs.toml ->
    /dev/ttyUSB0`` was opened on every `cudapkgs shell` in it, before any allow. The descriptor stays
    non-blocking unless `blocking` (no difference for a file on disk; a "regular" pseudo-file that
    waits, as ``/proc/kmsg``, then answers EAGAIN instead of hanging the read). Raises OSError whose
    message names `path` and why.
    """
    name = os.fspath(path)
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow_links)
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else _kind(st.st_mode)
        raise _refusal(f"{name} is {kind}, not a regular file; refusing to read it")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise _refusal(f"{name} changed while it was opened; refusing to read it")
        if blocking:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_input_file(path: str | os.PathLike[str], *, what: str = "file", max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them.

    Opened non-blocking and checked with fstat, so a FIFO swapped in after the check
    cannot hang the read.  Raises `InputFileError`.
    """
    check_regular_file(path, what=what)
    try:
        fd = open_regular(path)
    except OSError as error:
        raise InputFileError(what, path, error.strerror or str(error)) from None
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(what, path, f"is {_kind(st.st_mode)}, not a regular file; refusing to read it")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputFileError(what, path, f"is larger than {max_bytes} bytes")
    return data


def open_cached(path: str | os.PathLike[str], *, follow_links: bool = False, max_bytes: int | None = None,
                dir_fd: int | None = None, owned: bool = False) -> Any:
    """A binary file object (``open(fd, "rb")``) for the regular file `path` in a cache: a wheel,
    a redist or source archive, a ``.sha256``/``.checked`` record, an eval-cache entry, a data or probe
    cache file.

    Anyone who could write the cache directory (or a cache a configuration points into a cloned
    repository) may have put a FIFO, a device or a link there: the file is opened with
    ``O_NONBLOCK`` (a FIFO cannot hang the open), with ``O_NOFOLLOW`` unless `follow_links`, and
    then its descriptor must be a regular file (``fstat``) of at most `max_bytes` bytes (None: any
    size; the caller reads no more than ``fstat`` said).  With `owned` (a cache whose contents are
    believed as they are: the parsed data files, the host probes' answers), it must also belong to
    the current user or root and have no group or world write bit, as an evaluation cache entry
    must: another user who can write the directory cannot make a file that is yours.  The
    descriptor is made blocking again for reading.  Raises OSError whose message names `path` and
    why (a caller treats it as a miss or names the cache in its own error).
    """
    fd = open_regular(path, follow_links=follow_links, dir_fd=dir_fd, blocking=True)  # no FIFO or device is opened
    try:
        st = os.fstat(fd)
        if owned and (st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022):
            raise OSError(f"{os.fspath(path)} belongs to uid {st.st_uid} or is writable by others "
                          f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing to read it")
        if max_bytes is not None and st.st_size > max_bytes:
            raise OSError(f"{os.fspath(path)} is larger than {max_bytes} bytes; refusing to read it")
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_cached(path: str | os.PathLike[str], max_bytes: int, *, follow_links: bool = False,
                owned: bool = False) -> bytes:
    """The bytes of the regular cache file `path`, opened as `open_cached` opens it (`owned` too), at most
    `max_bytes` of them (a file that grew past them while read is refused).  Raises OSError."""
    with open_cached(path, follow_links=follow_links, max_bytes=max_bytes, owned=owned) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(f"{os.fspath(path)} is larger than {max_bytes} bytes; refusing to read it")
    return data


_DECIMAL = re.compile(r"[0-9]{1,20}", re.ASCII)


def parse_decimal(text: str) -> int:
    """A non-negative integer written in ASCII digits only, as every outside format writes it.

    Python's `int` also takes the digits of other scripts (U+0663 ARABIC-INDIC DIGIT THREE,
    fullwidth digits), and `str.isdigit` also superscripts and circled digits (U+00B2, U+2460)
    that `int` then refuses: a narinfo with such a NarSize was an internal error, or a size no
    other implementation would read. Signs, underscores, spaces and more than 20 digits are
    refused too. Raises ValueError (the caller names the input in its own error).
    """
    if not isinstance(text, str) or _DECIMAL.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a number (ASCII digits only)")
    return int(text)
