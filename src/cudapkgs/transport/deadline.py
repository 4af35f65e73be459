"""Deadlines that hold whatever the peer does: a watchdog thread cuts a transfer's sockets when it passes.

A socket timeout bounds one read; a server sending a byte every few seconds never trips it and
can hold a reader forever (issue 23). Each transfer gets a `Watch` with an absolute deadline
(`time.monotonic()` seconds); the sockets it uses are attached to it (`attach`, from the
connection classes in `http`, while the request runs in that thread). When the deadline passes,
one watchdog thread per process shuts those sockets down, which ends any blocked connect, TLS
handshake, send or receive at once; the reader then sees `Watch.expired` and reports the deadline.
Name resolution (``getaddrinfo``) is the one step a shut-down socket cannot end.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["DEADLINE_BASE_S", "DEADLINE_FLOOR_BPS", "Watch", "attach", "current", "cut_socket", "deadline_for", "watch"]

#: A deadline is this many seconds, plus the object's bound at `DEADLINE_FLOOR_BPS`.
DEADLINE_BASE_S = 60.0
#: The slowest average rate (bytes/s) a whole object may take before its deadline passes.
DEADLINE_FLOOR_BPS = 128 << 10


def deadline_for(nbytes: int, *, base_s: float = DEADLINE_BASE_S, floor_bps: float = DEADLINE_FLOOR_BPS) -> float:
    """Seconds a transfer of up to `nbytes` bytes may take: `base_s` plus `nbytes` at `floor_bps` bytes/s."""
    return base_s + max(0, nbytes) / floor_bps


class Watch:
    """One transfer's deadline and the cuts (socket shut-downs) to make when it passes.

    `close()` ends the watch: afterwards nothing is cut, so a connection can go back to a pool.
    Cutting and closing take the same lock, so a socket is never shut down after `close()` returned.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self.done = False
        self._cuts: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def remaining(self) -> float:
        """Seconds left before the deadline (negative once it passed)."""
        return self.deadline - time.monotonic()

    def add(self, cut: Callable[[], None]) -> None:
        """Call `cut()` when the deadline passes (at once if it passed already); nothing after `close()`."""
        with self._lock:
            if self.done:
                return
            if self.expired:
                _call(cut)
            else:
                self._cuts.append(cut)

    def add_socket(self, sock: socket.socket) -> None:
        """Shut `sock` down (both directions) when the deadline passes."""
        self.add(lambda: _shutdown(sock))

    def close(self) -> bool:
        """End the watch; True if the deadline had passed (the sockets were cut: do not reuse them)."""
        with self._lock:
            self.done = True
            self._cuts.clear()
            return self.expired

    def _expire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.expired = True
            for cut in self._cuts:
                _call(cut)
            self._cuts.clear()


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._compact_at = 1024

    def watch(self, deadline: float) -> Watch:
        entry = Watch(deadline)
        with self._cond:
            if len(self._heap) >= self._compact_at:  # closed watches wait for their deadline: drop them now and then
                self._heap = [e for e in self._heap if not e[2].done]
                heapq.heapify(self._heap)
                self._compact_at = max(1024, 2 * len(self._heap))
            heapq.heappush(self._heap, (deadline, next(self._order), entry))
            if self._thread is None or not self._thread.is_alive():  # also after a fork: threads do not survive it
                self._thread = threading.Thread(target=self._run, name="cudapkgs-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
        return entry

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][2].done:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    delay = self._heap[0][0] - time.monotonic()
                    if delay <= 0:
                        entry = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(delay)
            entry._expire()


_WATCHDOG = _Watchdog()


def _after_fork_in_child() -> None:
    """A forked child gets a watchdog of its own: the parent's deadlines would otherwise cut, from the
    child, sockets the parent still uses (a shutdown acts on the connection, whichever process calls it),
    and the condition's lock may be held by the parent's watchdog thread, which is not in the child."""
    global _WATCHDOG
    _WATCHDOG = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
_CURRENT = threading.local()


def watch(deadline: float) -> Watch:
    """A `Watch` that cuts what is attached to it at `deadline` (a `time.monotonic()` value)."""
    return _WATCHDOG.watch(deadline)


@contextlib.contextmanager
def current(entry: Watch) -> Iterator[Watch]:
    """Within the block, sockets this thread's connections open or use are attached to `entry`."""
    previous = getattr(_CURRENT, "watch", None)
    _CURRENT.watch = entry
    try:
        yield entry
    finally:
        _CURRENT.watch = previous


def attach(sock: socket.socket | None) -> None:
    """Attach `sock` to this thread's current watch (none: nothing happens)."""
    entry = getattr(_CURRENT, "watch", None)
    if entry is not None and sock is not None:
        entry.add_socket(sock)


def cut_socket(sock: socket.socket | None) -> None:
    """Shut `sock` down now, as a deadline does (a read blocked on it returns at once); errors are ignored."""
    if sock is not None:
        _call(lambda: _shutdown(sock))


def _shutdown(sock: socket.socket) -> None:
    # socket.socket's own shutdown, also for an SSLSocket: its override would drop the TLS state
    # under a reader in another thread; on the file descriptor, the blocked call just returns.
    socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _call(cut: Callable[[], None]) -> None:
    with contextlib.suppress(OSError, ValueError):
        cut()
