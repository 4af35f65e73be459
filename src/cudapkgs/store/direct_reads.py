"""Reading back, past the page cache, the files this process wrote past it (``O_DIRECT``).

Used for wheel members written with ``$CUDAPKGS_DIRECT_WRITES=on`` (`fetch.wheel_unpack.write_member_to`;
under ``auto`` they are written through the page cache, which the read-back then finds them in).
A file written with `cudapkgs.store.direct_writes.DirectWriter` is not in the page cache;
reading it back through the cache (the NAR hash and reference scan of an output, a RECORD
digest) would put every page of it there, and on a host that took the guest's free memory
back (a virtio balloon with free page reporting) each newly used page costs about as much
system time as the buffered write that was avoided (docs/bench-wheels.md, fifth round:
1 GiB written buffered then read back, 1.2-2.4 s of system time; written and read
``O_DIRECT``, 0.1 s).

`remember(fd)` notes a file (by device and inode) once its direct write is finished;
`written_direct(st)` says whether a file's ``lstat`` is one of those; `pieces(fd, size)`
reads such a file from its start with ``O_DIRECT`` into a page-aligned buffer, a few pieces
ahead on a thread of its own, each piece copied out (the hashing thread keeps it), and falls
back to ordinary reads where the file system refuses ``O_DIRECT`` or a read comes back short
before the end.
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


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: `_lock`, perhaps held by one of them at the fork
    (a read-ahead giving a buffer back), would never be released. The child starts with a lock of its own;
    the notes and the free buffers (copies of the parent's) stay."""
    global _lock
    _lock = _thread.allocate_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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


_free: list[memoryview] = []  # aligned buffers (anonymous mmaps of PIECE bytes) not in use, under _lock


def _take_buffer() -> memoryview:
    with _lock:
        if _free:
            return _free.pop()
    import mmap

    return memoryview(mmap.mmap(-1, PIECE))  # page-aligned; its pages stay the process's for the next file


def _give_back(buffer: memoryview) -> None:
    with _lock:
        if len(_free) < _KEPT_BUFFERS:
            _free.append(buffer)
            return
    mapping = buffer.obj
    buffer.release()
    mapping.close()  # type: ignore[union-attr]


_KEPT_BUFFERS = 4
#: Pieces read ahead of the consumer (`pieces`): the disk reads the next while the caller scans and hashes.
AHEAD = 2


def pieces(fd: int, size: int) -> Iterator[bytes]:
    """The bytes of the regular file open (for reading) as `fd`, from offset 0, in pieces of at most `PIECE`
    bytes: at most ``size + 1`` bytes in all, so that a caller expecting `size` bytes sees a file that grew.

    Read with ``O_DIRECT`` (set on `fd` with ``fcntl`` for the time of the reads, then cleared)
    into a page-aligned buffer and copied out, on a thread of its own that reads up to `AHEAD`
    pieces ahead (an ``O_DIRECT`` read waits for the disk: 1.57-1.72 s for a NAR pass over a GiB
    read so without reading ahead, 1.08-1.14 s from the page cache); where the file system refuses
    it (``EINVAL`` from ``fcntl`` or the first read) or a read comes back short of a full piece
    before the end, the rest is read with ordinary ``pread`` calls. The file's offset is not used.
    Raises OSError from the reads. Closing the generator early stops the thread before it returns.
    """
    import fcntl

    limit = size + 1
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError:
        yield from _ordinary(fd, 0, limit)
        return
    try:
        reader = _ReadAhead(fd, limit)
    except BaseException:  # no thread to be had: the descriptor is left as it came
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        raise
    try:
        while (item := reader.next()) is not None:
            yield item
    finally:
        reader.stop()  # no read of `fd` runs after this
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    yield from _ordinary(fd, reader.offset, limit)


def _ordinary(fd: int, offset: int, limit: int) -> Iterator[bytes]:
    while offset < limit:
        data = os.pread(fd, min(PIECE, limit - offset), offset)
        if not data:
            return
        offset += len(data)
        yield data


class _ReadAhead:
    """``O_DIRECT`` reads of `fd` from offset 0 up to `limit` bytes on a thread, `AHEAD` pieces ahead of `next`.

    `offset`, once `next` returned None: where ordinary reads take over (the end, a short read, or 0
    where the file system refused the first direct read)."""

    __slots__ = ("_done", "_queue", "_stopping", "_thread", "offset")

    def __init__(self, fd: int, limit: int) -> None:
        import queue
        import threading

        self.offset = 0
        self._queue: queue.Queue = queue.Queue(AHEAD)
        self._stopping = False
        self._done = False
        self._thread = threading.Thread(target=self._run, args=(fd, limit), name="cudapkgs-direct-read", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        import queue

        while not self._stopping:
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, fd: int, limit: int) -> None:
        buffer = _take_buffer()
        offset = 0
        try:
            while offset < limit and not self._stopping:
                try:
                    got = os.preadv(fd, [buffer], offset)
                except OSError as error:
                    if offset == 0 and error.errno == 22:  # EINVAL: this file system's O_DIRECT wants otherwise
                        break
                    self._put(error)
                    return
                if got == 0:
                    break
                take = min(got, limit - offset)
                if not self._put(bytes(buffer[:take])):
                    return
                offset += take
                if got < PIECE:  # the end, or a short read: the rest (if any) read the ordinary way
                    break
            self._put(("end", offset))
        except BaseException as error:  # pragma: no cover - MemoryError and the like: reported by next()
            self._put(error)
        finally:
            _give_back(buffer)

    def next(self) -> bytes | None:
        """The next piece; None at the end of the direct reads (`offset` set); raises the thread's OSError."""
        if self._done:
            return None
        item = self._queue.get()
        if isinstance(item, bytes):
            return item
        self._done = True
        if isinstance(item, BaseException):
            raise item
        self.offset = item[1]
        return None

    def stop(self) -> None:
        """Stop the thread (it may be waiting to hand over a piece) and wait for it."""
        self._stopping = True
        self._thread.join()
