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

    def hits(self, path: str | None = None) -> int:
        """How many requests asked for `path` (for any path when None)."""
        return sum(1 for p, _ in self.requests if path is None or p == path)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
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


def serve() -> Iterator[Server]:
    """A running loopback server, stopped when the generator closes (use it in a fixture)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = Server(url=f"http://127.0.0.1:{httpd.server_address[1]}")
    httpd.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
