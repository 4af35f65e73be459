"""A raw TCP server on 127.0.0.1 whose connections run a scripted handler: slow, stalling or lying peers.

`raw_server(handler)` runs `handler(conn, server)` in a thread per connection; a handler that
loops checks `server.stopping` (an Event) so that stopping the server ends it, and every handler
is bounded by `server.cap_s` seconds whatever the client does, so a test stays bounded in time
even against a client that would wait forever.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator


class RawServer:
    def __init__(self, handler: Callable[[socket.socket, RawServer], None], cap_s: float) -> None:
        self.handler = handler
        self.cap_s = cap_s
        self.stopping = threading.Event()
        self.connections = 0
        self.requests: list[bytes] = []  # the first bytes of each connection (request line and headers)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            thread = threading.Thread(target=self._run, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self.handler(conn, self)
        with contextlib.suppress(OSError):
            conn.close()

    def read_request(self, conn: socket.socket) -> bytes:
        """The request's head (up to the blank line), recorded in `requests`."""
        data = b""
        conn.settimeout(self.cap_s)
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        with self._lock:
            self.requests.append(data)
        return data

    def drip(self, conn: socket.socket, data: bytes, every_s: float) -> None:
        """Send `data` a byte at a time, one every `every_s` seconds, until stopped or `cap_s` passed."""
        end = time.monotonic() + self.cap_s
        for byte in data:
            if self.stopping.wait(every_s) or time.monotonic() > end:
                return
            conn.sendall(bytes([byte]))

    def stop(self) -> None:
        self.stopping.set()
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._accepting.join(5)
        for thread in self._threads:
            thread.join(5)


@contextlib.contextmanager
def raw_server(handler: Callable[[socket.socket, RawServer], None], cap_s: float = 20.0) -> Iterator[RawServer]:
    """A running `RawServer`, stopped (its handlers ended) when the block ends."""
    server = RawServer(handler, cap_s)
    try:
        yield server
    finally:
        server.stop()
