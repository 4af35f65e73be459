"""Reading back, past the page cache, the files this process wrote past it (``O_DIRECT``).

A file written with `cudapkgs.store.direct_writes.DirectWriter` is not in the page cache;
reading it back through the cache (the NAR hash and reference scan of an output, a RECORD
digest) would put every page of it there, and on a host that took the guest's free memory
back (a virtio balloon with free page reporting) each newly used page costs about as much
system time as the buffered write that was avoided (docs/bench-wheels.md, fifth round:
1 GiB written buffered then read back, 1.2-2.4 s of system time; written and read
``O_DIRECT``, 0.1 s).

`remember(fd)` notes a file (by device and inode) once its direct write is finished;
`written_direct(st)` says whether a file's ``lstat`` is one of those; `pieces(fd, size)`
reads such a file from its start with ``O_DIRECT`` into a page-aligned buffer of this
thread, each piece copied out (the hashing thread keeps it), and falls back to ordinary
reads where the file system refuses ``O_DIRECT`` or a read comes back short before the end.
The note is only a hint for how to read: the bytes are the same either way (Linux writes
a file's dirty cached pages back before an ``O_DIRECT`` read of them: open(2), "O_DIRECT"),
so a stale note (an inode number used again) costs speed, never correctness.
"""

from __future__ import annotations

import _thread  # not `threading`: this module is imported with `nar`, at every start
import os
from collections.abc import Iterator

__all__ = ["PIECE", "remember", "written_direct", "pieces", "forget_all"]

#: Bytes read at a time with ``O_DIRECT`` (a multiple of every logical block size; 1 MiB reads
#: ran at 1.0-1.3 GB/s on this machine's virtio disk, 256 KiB ones at 0.75-1.0 GB/s).
PIECE = 1 << 20
#: At most this many files are remembered (the oldest notes go first): the ML environment writes about 3,000.
_MAX_NOTES = 1 << 16

_lock = _thread.allocate_lock()
_notes: dict[tuple[int, int], None] = {}  # (st_dev, st_ino), in the order noted
_local = _thread._local()  # .buffer: this thread's aligned buffer (an anonymous mmap, PIECE bytes)


def remember(fd: int) -> None:
    """Note that the file open as `fd` was written past the page cache (one ``fstat``).

    Raises OSError if `fd` cannot be ``fstat``-ed.
    """
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    with _lock:
        _notes.pop(key, None)
        _notes[key] = None
        while len(_notes) > _MAX_NOTES:
            del _notes[next(iter(_notes))]


def written_direct(st: os.stat_result) -> bool:
    """Whether the file whose ``stat`` is `st` was noted by `remember` in this process."""
    return (st.st_dev, st.st_ino) in _notes


def forget_all() -> None:
    """Drop every note (tests; a process that hands its files to another)."""
    with _lock:
        _notes.clear()


def _buffer() -> memoryview:
    buffer = getattr(_local, "buffer", None)
    if buffer is None:
        import mmap

        buffer = _local.buffer = memoryview(mmap.mmap(-1, PIECE))  # page-aligned, reused by this thread
    return buffer


def pieces(fd: int, size: int) -> Iterator[bytes]:
    """The bytes of the regular file open (for reading) as `fd`, from offset 0, in pieces of at most `PIECE`
    bytes: at most ``size + 1`` bytes in all, so that a caller expecting `size` bytes sees a file that grew.

    Read with ``O_DIRECT`` (set on `fd` with ``fcntl`` for the time of the reads, then cleared)
    into this thread's page-aligned buffer and copied out; where the file system refuses it
    (``EINVAL`` from ``fcntl`` or the first read) or a read comes back short of a full piece
    before the end, the rest is read with ordinary ``pread`` calls. The file's offset is not used.
    Raises OSError from the reads.
    """
    import fcntl

    limit = size + 1
    offset = 0
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    direct = False
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        direct = True
    except OSError:
        pass
    try:
        if direct:
            buffer = _buffer()
            while offset < limit:
                try:
                    got = os.preadv(fd, [buffer], offset)
                except OSError as error:
                    if offset == 0 and error.errno == 22:  # EINVAL: this file system's O_DIRECT wants otherwise
                        break
                    raise
                if got == 0:
                    return
                take = min(got, limit - offset)
                offset += take
                yield bytes(buffer[:take])
                if got < PIECE:  # the end, or a short read: the rest (if any) read the ordinary way
                    break
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            direct = False
        while offset < limit:
            data = os.pread(fd, min(PIECE, limit - offset), offset)
            if not data:
                return
            offset += len(data)
            yield data
    finally:
        if direct:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
