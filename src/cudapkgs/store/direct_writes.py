"""Writing a big new file with ``O_DIRECT``: around the page cache, from a page-aligned staging buffer.

Why: on this project's machines (VMs whose virtio balloon has free page reporting on) a buffered
write into memory the guest freed a while ago costs 2.0-2.7 s of system time per GiB, against
0.1-0.2 s for the same bytes written with ``O_DIRECT`` (docs/bench-speed.md, "Fourteenth session:
direct writes"). The store's big files (a NAR's shared libraries, a wheel's members) are written
once and read rarely right away, so they need not pass through the page cache.

The rules followed (open(2), "O_DIRECT" in NOTES, man-pages 6.9; the kernel's
Documentation/filesystems/vfs.rst on ``direct_IO``): the user buffer's address, each transfer's
length and the file offset must be multiples of the file system's (or device's) logical block
size, at most a page on every Linux file system this runs on; "Since Linux 6.1, O_DIRECT support
and alignment restrictions for a file can be queried using statx(2) [STATX_DIOALIGN]", which
Python does not expose, so `BLOCK` is the page size (4096 bytes), a multiple of every logical
block size up to it. A file system that does not support ``O_DIRECT`` answers ``EINVAL``, to
``open(2)`` and to ``fcntl(F_SETFL)`` alike (fcntl(2): F_SETFL "can change only the O_APPEND,
O_ASYNC, O_DIRECT, O_NOATIME, and O_NONBLOCK flags"; EINVAL for a file system without O_DIRECT).
So the file is opened as usual, ``O_DIRECT`` is switched on with ``fcntl``, the full aligned
blocks are written from an anonymous ``mmap`` (page-aligned by construction), and ``O_DIRECT`` is
switched off again for the last, partial block, which goes through the page cache.

The setting: ``$CUDAPKGS_DIRECT_WRITES`` = ``auto`` (the default: files of at least `DIRECT_MIN`
bytes, only on a machine whose virtio balloon has free page reporting on, and where the file system
accepts ``O_DIRECT``, probed once per device), ``on`` (every file of at least one block, where
accepted, whatever the machine) or ``off`` (never). Why ``auto`` asks for free page reporting
(`cudapkgs.host.page_reporting`: the virtio spec 1.2, §5.5.3, ``VIRTIO_BALLOON_F_REPORTING`` (bit 5)
negotiated by a bound balloon device, and Linux's Documentation/mm/free_page_reporting.rst): the
balloon's cost above is paid only there; elsewhere a buffered write costs the plain copy, returns
before the disk has the bytes, and leaves them in the page cache for their first use (``import torch``
took 1.0-1.2 s more reading libraries written directly from the disk: docs/bench-wheels.md, fifth
round). Decided once per process; where sysfs cannot be read or looks odd (``unknown``): buffered.
Wheel members are written buffered under ``auto`` even so (`fetch.wheel_unpack.write_member_to`).
It is an environment variable, not a key of
config.toml: that file holds Nixpkgs' ``config`` (what is built), and this setting changes only
how bytes reach the disk, never a store path.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading

TYPE_CHECKING = False  # concurrent.futures is imported when the first direct write needs a thread, not at start-up
if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

from ..errors import ConfigError, StoreError

__all__ = ["BLOCK", "DIRECT_MIN", "STAGING", "WRITE_THREADS", "DirectWriteSizeError", "DirectWriter", "direct_writes_setting",
           "direct_writes_wanted"]

#: Files of at least this many bytes are written directly (the `auto` setting). Measured in
#: docs/bench-speed.md ("Fourteenth session"): below a few MiB the staging copy and the synchronous
#: disk write cost more than the page cache's balloon faults save.
DIRECT_MIN = 4 << 20
#: The alignment of every direct transfer's length and offset, and of the staging buffer: the page
#: size (a multiple of every logical block size a Linux file system uses for O_DIRECT up to it).
BLOCK = max(mmap.PAGESIZE, 4096)
#: The staging buffers' size in bytes (a multiple of BLOCK): each direct write is one such buffer.
STAGING = 8 << 20
#: Threads doing the direct writes, for all writers of the process (one write in flight per writer).
WRITE_THREADS = 4

_ENV = "CUDAPKGS_DIRECT_WRITES"
_SETTINGS = ("auto", "on", "off")
_accepts: dict[int, bool] = {}  # st_dev -> whether its file system took O_DIRECT (probed or seen)
_local = threading.local()  # .buffers: this thread's idle staging buffers, kept for its next file


class DirectWriteSizeError(StoreError):
    """The bytes written to a `DirectWriter` are more or fewer than the size it was created for."""


def direct_writes_setting(env: dict[str, str] | None = None) -> str:
    """``auto``, ``on`` or ``off``: ``$CUDAPKGS_DIRECT_WRITES`` (case and blanks ignored; unset or empty: ``auto``).

    Raises ConfigError for any other value, naming the variable and the values it takes.
    """
    value = (os.environ if env is None else env).get(_ENV, "").strip().lower() or "auto"
    if value not in _SETTINGS:
        raise ConfigError(f"${_ENV} is '{value[:40]}': set it to auto, on or off (or unset it)")
    return value


def direct_writes_wanted(directory: str | bytes | os.PathLike[str], size: int, *,
                         sysfs: str | os.PathLike[str] | None = None) -> bool:
    """Whether a new file of `size` bytes in `directory` should be written with a `DirectWriter`.

    ``off``: never. ``auto``: `size` >= `DIRECT_MIN` and free page reporting ``on``
    (`host.page_reporting.free_page_reporting_here`, decided once per process; with `sysfs`, a
    sysfs root to ask instead, each call: tests); ``on``: `size` >= `BLOCK`; and in both, only
    where `directory`'s file system accepts ``O_DIRECT`` (probed once per device, with an unnamed
    ``O_TMPFILE`` in `directory`, and cached; where that cannot be probed, the first `DirectWriter`
    on the device finds out and falls back). Raises ConfigError for a bad setting; never OSError
    (a directory that cannot be statted is answered False).
    """
    setting = direct_writes_setting()
    if setting == "off" or size < (DIRECT_MIN if setting == "auto" else BLOCK):
        return False
    if setting == "auto":
        from ..host import page_reporting

        reporting = (page_reporting.free_page_reporting_here() if sysfs is None
                     else page_reporting.free_page_reporting(sysfs))
        if reporting != "on":
            return False
    try:
        device = os.stat(directory).st_dev
    except (OSError, ValueError):
        return False
    known = _accepts.get(device)
    if known is None:
        known = _probe(directory)
        if known is not None:
            _accepts[device] = known
    return known is not False


def _probe(directory: str | bytes | os.PathLike[str]) -> bool | None:
    """Whether `directory`'s file system takes O_DIRECT (an unnamed temporary file, gone at close); None: unknown."""
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except (OSError, AttributeError, ValueError):
        return None  # no O_TMPFILE there (or not allowed): the first writer finds out
    try:
        return _set_direct(fd, True)
    except OSError:
        return None
    finally:
        os.close(fd)


def _set_direct(fd: int, on: bool) -> bool:
    """Switch O_DIRECT on or off for `fd`; False (recorded for its device) where the file system refuses it."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    wanted = flags | os.O_DIRECT if on else flags & ~os.O_DIRECT
    if wanted == flags:
        return True
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, wanted)
    except OSError as error:
        if not on or error.errno != errno.EINVAL:
            raise
        _record(fd, False)
        return False
    return True


def _record(fd: int, accepts: bool) -> None:
    try:
        _accepts[os.fstat(fd).st_dev] = accepts
    except OSError:
        pass


def _take_buffers() -> list[mmap.mmap]:
    buffers = getattr(_local, "buffers", None)
    if buffers is not None:
        _local.buffers = None
        return buffers
    return [mmap.mmap(-1, STAGING), mmap.mmap(-1, STAGING)]  # anonymous, so page-aligned


def _give_back(buffers: list[mmap.mmap]) -> None:
    if getattr(_local, "buffers", None) is None:
        _local.buffers = buffers  # kept: their pages are already the process's (no new faults next file)
    else:
        for buffer in buffers:
            try:
                buffer.close()
            except BufferError:  # a view of it lives on (in a traceback): the garbage collector unmaps it
                pass


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _writes() -> ThreadPoolExecutor:
    """The threads that do the direct writes (one at a time per writer), so that a writer's disk time overlaps its caller's work."""
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="cudapkgs-direct-write")
    return _pool


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: the pool (its queue would never be served), the
    lock (perhaps held by a thread that is gone) and the thread's kept buffers start afresh."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()
    _local.buffers = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DirectWriter:
    """Writes exactly `size` bytes (None: as many as come, unchecked) to the new, empty file open on `fd`,
    the full blocks with O_DIRECT.

    `fd` must be open for writing at offset 0 of a new file (any other offset: buffered writes);
    the caller keeps owning it (opens, fchmods, closes it), and must not write to it itself until
    `finish` or `close` returned. ``write(data)`` takes any bytes-like object of any length and
    alignment and copies it into one of two page-aligned staging buffers of `STAGING` bytes (a pair
    per thread, reused by the thread's next writer); each full buffer is one direct ``write(2)``,
    done on a thread of a small shared pool while the caller fills the other buffer (at most one
    write in flight per writer, so the file's bytes land in order; a direct write waits for the
    disk, and this way the caller's hashing and decompressing go on meanwhile). ``finish()`` waits
    for it, writes the rest (its full blocks directly, the last partial block buffered, after
    ``O_DIRECT`` is switched off) and checks that `size` bytes came in. ``close()`` (or leaving the
    ``with`` block) waits for a write in flight and gives the buffers back; call it on every path.

    Where the file system refuses O_DIRECT (``EINVAL`` from fcntl or from a direct write, which then
    wrote nothing), the writer falls back to plain buffered writes silently and remembers the device.
    A file smaller than `BLOCK` is written buffered. Raises DirectWriteSizeError when more than
    `size` bytes are written or, at ``finish()``, fewer; OSError for a failing write (ENOSPC, EIO),
    raised by the `write` or `finish` after it (the write in flight is waited for first), after which
    the file holds some prefix of the data and the caller removes it. A short write is completed
    (and, if it left the offset unaligned, the rest goes buffered).
    """

    __slots__ = ("fd", "size", "written", "direct", "_buffers", "_views", "_current", "_fill", "_pending")

    def __init__(self, fd: int, size: int | None) -> None:
        if size is not None and size < 0:
            raise ValueError(f"a file of {size} bytes")
        self.fd = fd
        self.size = size  # bytes the file will hold (None: not known, not checked)
        self.written = 0  # bytes handed to write() so far
        self.direct = False  # whether O_DIRECT is on for fd now
        self._buffers: list[mmap.mmap] | None = None
        self._views: list[memoryview] | None = None
        self._current = 0  # the staging buffer being filled
        self._fill = 0  # bytes waiting in it
        self._pending: Future[None] | None = None  # the write in flight
        if (size is None or size >= BLOCK) and os.lseek(fd, 0, os.SEEK_CUR) % BLOCK == 0 and _set_direct(fd, True):
            self.direct = True
            self._buffers = _take_buffers()
            self._views = [memoryview(buffer) for buffer in self._buffers]

    def __enter__(self) -> DirectWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all of `data` (any bytes-like object); DirectWriteSizeError past `size`, OSError from the disk."""
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        n = len(view)
        if self.size is not None and self.written + n > self.size:
            raise DirectWriteSizeError(f"{self.written + n} bytes written to a file of {self.size}")
        self.written += n
        views = self._views
        if views is None:
            _write_all(self.fd, view)
            return
        staging, fill, pos = views[self._current], self._fill, 0
        while pos < n:
            take = min(STAGING - fill, n - pos)
            staging[fill : fill + take] = view[pos : pos + take]
            fill += take
            pos += take
            if fill == STAGING:
                self._wait()
                self._pending = _writes().submit(self._flush, staging, STAGING)
                self._current ^= 1
                staging, fill = views[self._current], 0
        self._fill = fill

    def _wait(self) -> None:
        """Wait for the write in flight; its OSError raised here.

        The write stays this writer's in flight until it is done: a wait cut short (Ctrl-C's
        KeyboardInterrupt, a signal handler's exception) leaves it for `close` to wait for, so its
        buffer is not reused nor `fd` closed (its number then reused by another file) under it.
        """
        pending = self._pending
        if pending is not None:
            try:
                pending.result()
            finally:
                if pending.done():
                    self._pending = None

    def _flush(self, staging: memoryview, end: int) -> None:
        """Write `staging`'s first `end` bytes (a multiple of BLOCK), directly while the kernel takes them."""
        done = 0
        while done < end:
            if self.direct:
                try:
                    done += _write_some(self.fd, staging[done:end])
                except OSError as error:
                    if error.errno != errno.EINVAL:
                        raise
                    _record(self.fd, False)  # nothing was written: the file system wants other alignment
                    self._buffered()
                else:
                    if done % BLOCK:  # a short write left the offset unaligned: the rest goes buffered (a
                        self._buffered()  # direct write there would fail EINVAL, taken for the device's refusal)
                    continue
            done += _write_some(self.fd, staging[done:end])

    def _buffered(self) -> None:
        """O_DIRECT off for fd (the rest of the file goes through the page cache)."""
        if self.direct:
            _set_direct(self.fd, False)
            self.direct = False

    def finish(self) -> None:
        """Write what is left and leave fd without O_DIRECT; DirectWriteSizeError unless exactly `size` bytes came."""
        if self.size is not None and self.written != self.size:
            raise DirectWriteSizeError(f"{self.written} bytes written to a file of {self.size}")
        self._wait()
        if self._views is not None and self._fill:
            staging, fill, self._fill = self._views[self._current], self._fill, 0
            aligned = fill - fill % BLOCK
            if aligned:
                self._flush(staging, aligned)
            self._buffered()
            if aligned < fill:
                _write_all(self.fd, staging[aligned:fill])
        self._buffered()
        self.close()

    def close(self) -> None:
        """Wait for a write in flight (its error is the caller's to have seen, or not), give the buffers back.

        Idempotent; fd is not closed, and may still have O_DIRECT on. A write not started yet is
        cancelled; one started is waited for to its end even through a KeyboardInterrupt (or another
        exception from a signal handler), which is raised again once the write is over and the
        buffers are given back: only then may the caller close fd.
        """
        interrupted: BaseException | None = None
        pending = self._pending
        if pending is not None and not pending.cancel():  # a write not started yet is dropped; else waited for
            from concurrent.futures import wait

            while not pending.done():  # the buffer may not be reused, nor fd closed, while the kernel reads it
                try:
                    wait([pending])
                except BaseException as error:  # Ctrl-C meanwhile: raised once the write is over
                    interrupted = error
        self._pending = None
        if self._views is not None:
            for view in self._views:
                view.release()
            self._views = None
        if self._buffers is not None:
            buffers, self._buffers = self._buffers, None
            _give_back(buffers)
        if interrupted is not None:
            raise interrupted


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """`data` written in full to `fd` (looping over short writes); OSError from the kernel."""
    written = _write_some(fd, data) if len(data) else 0
    if written < len(data):
        view = memoryview(data)
        while written < len(view):
            written += _write_some(fd, view[written:])


def _write_some(fd: int, data: bytes | memoryview) -> int:
    """One write(2) of non-empty `data`: the bytes taken (at least one); OSError, EIO for a write that took none."""
    written = os.write(fd, data)
    if not written:
        raise OSError(errno.EIO, "the disk took none of the bytes written")
    return written
