"""The low-speed rule inside one read: a peer trickling bytes into a big read is cut while the read waits.

`http.Response` checks the rule (`Limits.low_speed_bps` over `Limits.low_speed_s` seconds of waiting)
when a read returns. A bulk read gathers many receives in C (http.client's ``readinto``, up to a MiB),
so a server sending one byte a second kept one ``read(1 MiB)`` waiting for twelve days, within the
object's deadline (which grows with its size), and no per-receive timeout (`Limits.read_s`) ever
tripped. `StallGuard` counts the bytes of every receive on the socket itself (a counting stand-in
for the socket under http.client's buffered reader) and, from the deadline watchdog's thread
(`transport.deadline`), looks at the read in progress every quarter of `low_speed_s`: once a read has
waited `low_speed_s` seconds or more and its receives brought fewer than `low_speed_bps` bytes per
second of its waiting, the socket is shut down, the read ends at once, and the response reports
the stall. A response whose socket cannot be reached this way (another urllib3 layout) keeps the
check at each read's end only.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from . import deadline as _deadline

__all__ = ["StallGuard"]


class _CountingSocket:
    """A socket's stand-in for http.client's `socket.SocketIO`: `recv_into` counts the bytes it brings."""

    __slots__ = ("_sock", "received")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self.received = 0

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        n = self._sock.recv_into(buffer, nbytes, flags)
        self.received += n
        return n

    def __getattr__(self, name: str) -> Any:  # fileno, _decref_socketios, timeouts: the socket's own
        return getattr(self._sock, name)


class StallGuard:
    """The in-read low-speed check of one response (`raw`: urllib3's response) under `bps` bytes/s over
    `seconds`. Call `begin()` before a read and `end()` after it; `stalled` says the guard cut the
    socket (the read's error is then the stall, not a broken connection); `close()` when the
    response is done. With `bps` 0 or the socket out of reach it does nothing. `watch` is the
    response's deadline: once it is over (closed or passed) the checks stop too, so a response
    never closed is not looked at forever."""

    def __init__(self, raw: Any, bps: int, seconds: float, watch: Any = None) -> None:
        self._watch = watch
        self.stalled: str | None = None
        self._bps, self._seconds = bps, seconds
        self._lock = threading.Lock()
        self._closed = False
        self._read: tuple[int, float] | None = None  # the read in progress: (bytes received before it, its start)
        self._counter: _CountingSocket | None = None
        self._sock: socket.socket | None = None
        if bps > 0 and seconds > 0:
            self._install(raw)
        if self._counter is not None:
            self._arm()

    def _install(self, raw: Any) -> None:
        fp = getattr(getattr(raw, "_fp", None), "fp", None)  # http.client's buffered reader of the socket
        io = getattr(fp, "raw", None)
        sock = getattr(io, "_sock", None)
        if not isinstance(sock, socket.socket):
            return
        self._counter = _CountingSocket(sock)
        try:
            io._sock = self._counter
        except AttributeError:
            self._counter = None
            return
        self._sock = sock

    def begin(self) -> None:
        """A read starts (in the reading thread)."""
        if self._counter is not None:
            # one attribute, set at once: a check on the watchdog's thread never pairs one read's start with
            # the next one's byte count (it then saw a healthy long read as one that got nothing)
            self._read = (self._counter.received, time.monotonic())

    def end(self) -> None:
        """The read returned or raised."""
        self._read = None

    def close(self) -> None:
        """No more checks (the response is done or closed)."""
        with self._lock:
            self._closed = True

    def _arm(self) -> None:
        _deadline.watch(time.monotonic() + self._seconds / 4).add(self._check)

    def _check(self) -> None:
        """On the watchdog's thread: cut a read that has waited `seconds` at less than `bps`, else look again later."""
        with self._lock:
            if self._closed or (self._watch is not None and (self._watch.done or self._watch.expired)):
                return
            read, counter = self._read, self._counter
            if read is not None and counter is not None:
                base, began = read
                waited = time.monotonic() - began
                got = counter.received - base
                if waited >= self._seconds and got < self._bps * waited:
                    self.stalled = (f"stalled: {got} bytes in {waited:.0f} s of waiting inside one read, slower "
                                    f"than {self._bps} bytes/s")
                    self._closed = True
                    _deadline.cut_socket(self._sock)
                    return
        self._arm()
