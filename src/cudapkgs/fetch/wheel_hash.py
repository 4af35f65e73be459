"""A cached wheel's whole-file sha256, taken from the bytes its members' readers read anyway.

An unpack (`cudapkgs.fetch.wheel_unpack`) or install (`cudapkgs.fetch.wheel_install`) of a wheel
pinned by sha256 reads the wheel's bytes for two purposes: the members' compressed data, read
with ``pread`` by the unzip threads (largest member first, several at once), and the whole file,
in order, for its sha256. Read separately, every byte crossed from the page cache into the process
twice: torch's 858 MiB wheel, the ML environment's 3 GB of wheels, about 0.8 CPU-s (issue 34,
item 2; docs/bench-wheels.md). `SharedReadHash` hashes the file in order on a thread of its own
and takes each range from a member reader that offered (`offer`) it (the same ``bytes`` object the
reader inflates, never copied); it reads itself only what nobody offers (local headers, the
central directory, members read after it passed them, chunks dropped beyond `cap`).

The order of a sha256 is the file's, the readers' is largest member first, so a reader's chunks
that lie ahead of the hash are kept until the hash gets there, at most `cap` bytes in all
(32 MiB); a chunk past that is dropped (the hash reads it again later: the old cost, for those
bytes only) and no reader ever waits for the hash. The hash waits only for a member being
streamed (`stream`) whose next chunk is the one it needs, which its reader is about to read.

What is hashed is exactly what was unpacked, where it was offered: the two reads of before could
see different bytes if the file was written between them.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from ..errors import FetchError

__all__ = ["SharedReadHash"]

#: Bytes kept of chunks offered ahead of the hash (per wheel).
CAP = 32 << 20
#: The hash's own reads: at most this many bytes at a time.
_READ = 1 << 20
#: A waiting hash is woken once offered bytes reach this far past its place (or a stream's end).
_BATCH = 1 << 19
#: The size of the readers' chunks (`wheel_unpack._CHUNK`): kept chunks are full when one more would not fit.
_OFFER = 1 << 18


class SharedReadHash:
    """The sha256 of the file open as `fd` (its size at the start: no more is hashed), computed on a
    thread of its own, preferring bytes offered (`offer`) by the member readers to reading them again.

    `offered_bytes` and `read_bytes` say afterwards how many bytes of the file came from the
    readers and how many the hash read itself (their sum is the file's size).
    """

    def __init__(self, fd: int, *, cap: int = CAP) -> None:
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._cap = cap
        self._cond = threading.Condition(threading.Lock())
        self._pos = 0  # bytes hashed so far (the hash's place in the file)
        self._pending: dict[int, bytes] = {}  # chunks offered ahead of the hash, by their offset
        self._starts: list[int] = []  # the offsets of `_pending`, sorted
        self._pending_bytes = 0
        self._streams: dict[int, list[int]] = {}  # token -> [start, end, cursor]: members being read in order
        self._token = 0
        self._closed = False  # no reader offers any more: the hash reads the rest itself
        self._waiting = False
        self._waiting_on: list[int] | None = None  # what the waiting hash waits for (a stream's or a plan's entry)
        self._wake_at = 0  # while waiting: the offset an offered chunk must reach to wake the hash
        self._full_told = False  # the waiting hash was told the kept chunks are full (told once per wait)
        self._digest: str | None = None
        self._error: BaseException | None = None
        self.offered_bytes = 0
        self.read_bytes = 0
        self._planned: dict[int, list[int]] = {}  # header offset -> [end, state: 0 planned, 1 streaming, 2 done]
        self._thread = threading.Thread(target=self._run, name="cudapkgs-wheel-sha256", daemon=True)
        self._started = False

    def start(self, planned: Iterable[tuple[int, int]] = ()) -> None:
        """Start hashing, once the readers are about to start (a hash started earlier runs ahead of
        them and reads everything itself). `planned`: ``(start, end)`` of the members that will be
        streamed (`stream` with that `start`), the largest first: the hash waits for their readers
        rather than reading their bytes itself, unless it was closed first (`close`)."""
        with self._cond:
            if self._started:
                return
            self._started = True
            for start, end in planned:
                self._planned[start] = [end, 0]
        self._thread.start()

    # -- the readers' side ---------------------------------------------------------------------------

    def offer(self, offset: int, data: bytes) -> None:
        """`data`, read by a member reader at `offset` of the file: kept for the hash unless it is
        behind the hash, or ahead of it with `cap` bytes kept already. Never waits (but for the lock)."""
        end = offset + len(data)
        with self._cond:
            for stream in self._streams.values():  # the reader of a streamed member moved on
                if stream[0] <= offset < stream[1] and stream[2] <= offset:
                    stream[2] = end
                    break
            if end <= self._pos or self._closed or offset >= self._size:
                return
            if offset in self._pending:
                return
            if offset > self._pos and self._pending_bytes + len(data) > self._cap:
                # Full: the chunks farthest from the hash make room for a nearer one, else this one is dropped
                # (the hash reads it itself: the cursor moved past it).
                while self._starts and self._starts[-1] > offset and self._pending_bytes + len(data) > self._cap:
                    self._pending_bytes -= len(self._pending.pop(self._starts.pop()))
                if self._pending_bytes + len(data) > self._cap:
                    if self._waiting and not self._full_told:  # full: the hash may overtake the member it waits on
                        self._full_told = True
                        self._cond.notify()
                    return
            self._pending[offset] = data
            bisect.insort(self._starts, offset)
            self._pending_bytes += len(data)
            full = self._pending_bytes + _OFFER > self._cap
            if self._waiting and (end >= self._wake_at or (full and not self._full_told)):
                self._full_told = full
                self._cond.notify()  # a batch to hash (one wake-up per `_BATCH`, not per chunk), or full

    @contextmanager
    def stream(self, start: int, end: int, planned: int | None = None) -> Iterator[None]:
        """Within this block a reader reads ``[start, end)`` of the file in order, offering each
        chunk: the hash, arrived there, waits for the chunk rather than reading it again.
        `planned`: the start this member was announced with (`start`), if it was."""
        plan = self._planned.get(planned) if planned is not None else None
        with self._cond:
            self._token += 1
            token = self._token
            self._streams[token] = [start, end, start]
            if plan is not None:
                plan[1] = 1
                if self._waiting and self._waiting_on is plan:  # the member the hash waits for started
                    self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                stream = self._streams.pop(token)
                if plan is not None:
                    plan[1] = 2
                if self._waiting and self._waiting_on is stream:  # it ended before the hash's place (a failure)
                    self._cond.notify()

    def close(self) -> None:
        """No reader offers any more: the hash takes what was kept and reads what is left itself."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    # -- the result ------------------------------------------------------------------------------------

    def join(self) -> None:
        """Wait until the hash's thread is done (after `close`: no reader is left to wait for)."""
        self.close()
        self.start()
        self._thread.join()

    def result(self) -> str:
        """The hex sha256 of the file's bytes up to its size when this began (fewer when it was cut
        short meanwhile); `close` is implied. Raises FetchError if the file could not be read."""
        self.join()
        if self._error is not None:
            raise FetchError(f"cannot read the wheel to check its sha256: {self._error}")
        assert self._digest is not None
        return self._digest

    # -- the hash's thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            digest = hashlib.sha256()
            while self._pos < self._size:
                data = self._next()
                digest.update(data)  # outside the lock: hashlib releases the GIL for large updates
            self._digest = digest.hexdigest()
        except BaseException as error:  # an OSError: reported by result()
            self._error = error

    def _next(self) -> bytes | memoryview:
        """The bytes at the hash's place (offered, or read here), the place moved past them."""
        with self._cond:
            while True:
                pos = self._pos
                taken = self._take(pos)
                if taken is not None:
                    self._pos = pos + len(taken)
                    self.offered_bytes += len(taken)
                    return taken
                if not self._closed and (waiting_on := self._worth_waiting(pos)) is not None:
                    self._waiting_on = waiting_on
                    self._waiting = True  # the member's reader reads this range next, or will start on it
                    self._full_told = False
                    self._wake_at = pos + _BATCH
                    for s in self._streams.values():
                        if s[0] <= pos < s[1]:
                            self._wake_at = min(self._wake_at, s[1])  # or its end, whichever comes first
                    self._cond.wait()
                    self._waiting = False
                    continue
                until = min(self._size, pos + _READ)
                after = bisect.bisect_right(self._starts, pos)
                if after < len(self._starts) and self._starts[after] < until:
                    until = self._starts[after]
                for s in self._streams.values():
                    if pos < s[2] < until:
                        until = s[2]
                for start, p in self._planned.items():
                    if pos < start < until and p[1] == 0:
                        until = start
                break
        data = os.pread(self._fd, until - pos, pos)
        with self._cond:
            if not data:  # the file was cut short: the hash of what it held (a mismatch, as a change is)
                self._size = pos
                return data
            self._pos = pos + len(data)
            self.read_bytes += len(data)
            self._drop_behind()
        return data

    def _worth_waiting(self, pos: int) -> list[int] | None:
        """What to wait for (a stream's or an announced member's entry) rather than read the bytes at `pos`
        (with the lock held); None: read them.

        Yes while a member being streamed has its next chunk there, or a member announced to `start`
        and not started yet begins there. But when the kept chunks are full (other readers' chunks
        are being dropped), a streamed member with fewer bytes left than the other streams ahead of
        it is overtaken (its rest read here, and the readers' bytes ahead kept), and an announced
        member is not waited for."""
        waiting_on = next((s for s in self._streams.values() if s[0] <= pos < s[1] and s[2] <= pos), None)
        full = self._pending_bytes + _OFFER > self._cap
        if waiting_on is not None:
            if not full:
                return waiting_on
            ahead = sum(s[1] - s[2] for s in self._streams.values() if s is not waiting_on and s[2] > pos)
            return waiting_on if waiting_on[1] - pos >= ahead else None
        if full:
            return None
        return next((p for start, p in self._planned.items() if start <= pos < p[0] and p[1] == 0), None)

    def _take(self, pos: int) -> bytes | memoryview | None:
        """The offered bytes from `pos` on (removed from the kept ones), None when none covers it."""
        at = bisect.bisect_right(self._starts, pos) - 1  # the last chunk starting at or before pos
        if at < 0:
            return None
        start = self._starts[at]
        chunk = self._pending[start]
        if start + len(chunk) <= pos:
            return None
        del self._starts[at]
        del self._pending[start]
        self._pending_bytes -= len(chunk)
        if start == pos and pos + len(chunk) <= self._size:
            return chunk
        return memoryview(chunk)[pos - start: self._size - start]

    def _drop_behind(self) -> None:
        """Forget kept chunks wholly behind the hash (it read them itself)."""
        keep = bisect.bisect_right(self._starts, self._pos)  # those starting at or before the hash's place
        for start in self._starts[:keep]:
            chunk = self._pending[start]
            if start + len(chunk) <= self._pos:
                del self._pending[start]
                self._pending_bytes -= len(chunk)
        if keep:
            self._starts[:keep] = [start for start in self._starts[:keep] if start in self._pending]
