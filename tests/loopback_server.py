"""A loopback HTTP server (127.0.0.1 only) whose misbehaviour the tests script."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Server:
    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    #: One behaviour per request, consumed in order; "ok" once exhausted.
    #: ok | 500 | 404 | truncate | ignore-range
    script: list[str] = field(default_factory=list)
    #: (path, headers) of every request, in order.
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: TCP connections accepted (with keep_alive, fewer than requests when the client reuses them).
    connections: int = 0

    def hits(self, path: str | None = None) -> int:
        """How many requests asked for `path` (for any path when None)."""
        return sum(1 for p, _ in self.requests if path is None or p == path)


def _handler(server: Server, keep_alive: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def setup(self) -> None:
            super().setup()
            with server.lock:
                server.connections += 1

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            with server.lock:
                server.requests.append((self.path, dict(self.headers.items())))
                behaviour = server.script.pop(0) if server.script else "ok"
            body = server.files.get(self.path)
            if behaviour in ("500", "404") or body is None:
                self.send_error(int(behaviour) if behaviour != "ok" else 404)
                return
            start = 0
            wanted = self.headers.get("Range")
            if wanted and behaviour != "ignore-range":
                start = int(wanted.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            payload = body[start:]
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if behaviour == "truncate":
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(payload)

    return Handler


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # a client hanging up early is a test's point, not news
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(*, keep_alive: bool = False) -> Iterator[Server]:
    """A running loopback server, stopped when the generator closes (use it in a fixture).

    `keep_alive`: answer HTTP/1.1 and keep connections open between requests.
    """
    httpd = _Quiet(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = Server(url=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.RequestHandlerClass = _handler(state, keep_alive)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
