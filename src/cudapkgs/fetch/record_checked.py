"""What the wheel cache remembers of a wheel's RECORD check: "the wheel with sha256 X matched its RECORD".

A wheel's RECORD gives the sha256 of each member; checking every member against it (266 MiB
for the five CUDA compile wheels, 0.25 CPU-s; torch's 1.1 GB) proves only that the wheel
agrees with itself.  A wheel whose own sha256 is X always has the same members, so once the
wheel X passed that check, every later unpack of bytes hashing to X would pass it again.
`remember` writes ``<wheel>.checked`` beside the cached wheel after an unpack in which every
member matched and the whole file matched X; `passed` lets the next unpack skip the
per-member digests when the record names X and the scope of the check (which members an
unpacker checks: ``unpack`` for `cudapkgs.fetch.wheel_unpack`, ``install`` for
`cudapkgs.fetch.wheel_install`).  The wheel itself is still hashed whole while it unpacks and
refused unless it has X, so a record can only ever vouch for the bytes it was written for.

The record is as trusted as the ``<wheel>.sha256`` beside it (the same directory, the same
writer); for a wheel pinned by its package (torch), a forged record can let through only the
pinned bytes themselves, whatever their RECORD says.  Anything else, a missing record, one that is not a regular file, larger than
`_MAX_BYTES`, not ASCII, for another sha256 or another scope, means "check again".

Unchecked members are only as good as the bytes hashed: the unpacker takes the file's
identity and times before it reads (`settled_identity`) and compares them after; any write
in between gives the file a later ctime, unless it falls in the same tick of the file
system's clock as the last change (git's "racily clean" files).  So `settled_identity`
waits until the last change is more than `_RACY_NS` old (a tick is 1-10 ms on Linux; the
wheel cache touches a wheel once a build is done with it, `cache.in_use`, so a wheel taken from
the cache has usually settled long before) and gives None, a full check, for
times that are whole seconds (a coarse clock) or in the future.  A change seen after the
unpack means unpacking again with every digest: a touch by another build is not an error.
A write through a shared mapping to a page already written changes no time (POSIX mmap(): the
times are marked for update only at some point before the next msync), so a process that can write
the wheel and does so that way while it unpacks is not seen; nor would the member digests see it,
whose RECORD it can change in the same race. The hash is of the bytes read in this unpack, never
the process's memo of earlier checks (`wheel_unpack._HashInBackground`): that memo would widen
the race from one unpack to the whole build.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ..atomic_files import write_atomically

__all__ = ["SUFFIX", "identity", "passed", "remember", "settled_identity"]

SUFFIX = ".checked"
_MAGIC = "cudapkgs-record-checked-1"
_SCOPES = ("unpack", "install")
_MAX_BYTES = 1024
_RACY_NS = 25_000_000  # 25 ms: longer than a tick of the kernel's coarse clock (HZ >= 100)


def _record_path(wheel: Path) -> Path:
    return Path(wheel).with_name(Path(wheel).name + SUFFIX)


def identity(fd: int) -> tuple[int, int, int, int, int]:
    """(device, inode, size, mtime ns, ctime ns) of the file open as `fd`: any write changes the ctime."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _lines(wheel: Path) -> list[str]:
    """The record's lines; [] for a missing, odd or oversized record (never raises OSError)."""
    try:
        fd = os.open(_record_path(wheel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:
            return []
        data = os.read(fd, _MAX_BYTES + 1)
    except OSError:
        return []
    finally:
        os.close(fd)
    if len(data) > _MAX_BYTES:
        return []
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return []
    return text.splitlines()


def _line(scope: str, sha256: str) -> str:
    if scope not in _SCOPES:
        raise ValueError(f"scope must be one of {', '.join(_SCOPES)}, not {scope!r}")
    return f"{_MAGIC} {scope} sha256:{sha256.lower()}"


def settled_identity(fd: int) -> tuple[int, int, int, int, int] | None:
    """`identity(fd)` once the file's last change is more than `_RACY_NS` old (waiting at most a
    few times that), so that any later write changes it; None when that cannot be had (times in
    the future, whole seconds, or changing while waited for): then check every member."""
    for _ in range(3):
        try:
            now_identity = identity(fd)
        except OSError:
            return None
        mtime, ctime = now_identity[3], now_identity[4]
        if ctime % 1_000_000_000 == 0:
            return None  # a clock of whole seconds: a write could leave the times as they are
        age = time.time_ns() - max(mtime, ctime)
        if age < 0:
            return None
        if age > _RACY_NS:
            return now_identity
        time.sleep((_RACY_NS - age) / 1e9 + 0.001)
    return None


def passed(wheel: Path, sha256: str, scope: str) -> bool:
    """Whether the record beside `wheel` says that the wheel whose sha256 is `sha256` (hex) passed
    the RECORD check of `scope`.

    True lets the caller skip the per-member digests, never the whole file's sha256, which it
    must still compare with `sha256`, and `settled_identity` before with `identity` after.
    Raises ValueError for an unknown `scope`; never OSError (an unreadable record is no record).
    """
    return _line(scope, sha256) in _lines(wheel)


def remember(wheel: Path, sha256: str, scope: str) -> None:
    """Record that the wheel whose sha256 is `sha256` passed the RECORD check of `scope`.

    Call it only once every member matched its RECORD digest and the whole file `sha256`.
    Lines for other sha256 are dropped (the file beside `wheel` is for its current bytes).
    Written to a temporary file and renamed over the record; a failure to write is ignored
    (the next unpack checks again).  Raises ValueError for an unknown `scope`.
    """
    line = _line(scope, sha256)
    target = _record_path(wheel)
    known = {_line(other, sha256) for other in _SCOPES}
    lines = sorted({old for old in _lines(wheel) if old in known} | {line})
    try:  # a random name per writer, created new (never a file or link planted at a predictable name)
        write_atomically(target, "\n".join(lines) + "\n", sync=False)
    except OSError:
        pass
