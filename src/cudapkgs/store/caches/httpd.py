"""A small HTTP/1.1 server on asyncio, for a read-only service: GET and HEAD, every client input bounded.

What it does with what a client controls (RFC 9112 for the message syntax):

* at most `Limits.max_connections` open connections, and `Limits.max_per_client` from one
  address; one over either is answered ``503`` and closed at once;
* a request's head (request line and header fields) must arrive whole within
  `Limits.header_timeout` seconds of its first byte and fit in `Limits.max_header_bytes`
  (``431`` otherwise); a keep-alive connection waits `Limits.idle_timeout` seconds for its
  next request; a response that makes no progress for `Limits.send_timeout` seconds (a client
  that stops reading) is cut off. A slow client costs a socket and a few hundred bytes, never
  a thread;
* request bodies are not read beyond `MAX_DISCARDED_BODY` bytes (they are discarded before a
  ``405``); ``Transfer-Encoding`` in a request, a malformed line or a missing ``Host`` on
  HTTP/1.1 is ``400`` and the connection is closed;
* a client that goes away mid-response ends that response quietly (no traceback in the log).

One thread runs the event loop; the handler gives either a `Reply` (sent at once: the fast
path, no task) or a coroutine that streams through `Connection.write` and `Connection.sendfile`
(buffered writes that wait for the client, and the kernel's ``sendfile`` for file contents).
Blocking work belongs in the handler's own executor.

`HTTPServer` keeps the shape of the standard library's servers (``serve_forever``,
``shutdown`` from another thread, ``server_close``, ``server_address``) so callers and tests
can start it on a thread.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, BinaryIO

__all__ = ["Connection", "HTTPServer", "Limits", "Reply", "Request"]

#: A request body (of a method this server refuses) is read and dropped up to this many bytes, so
#: the client sees the answer rather than a reset; a larger one gets ``413`` and the connection closes.
MAX_DISCARDED_BODY = 1 << 20

_REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    413: "Content Too Large", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
    501: "Not Implemented", 503: "Service Unavailable", 505: "HTTP Version Not Supported",
}
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 section 5.6.2
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # not allowed in a field value (tab is)
_NOT_IN_TARGET = re.compile("[\x00- \x7f]")  # controls, space, DEL: never in a request target


@dataclass(frozen=True)
class Limits:
    """Bounds on what clients may hold (counts; seconds; bytes). See the module's docstring."""

    max_connections: int = 256
    max_per_client: int | None = 64
    header_timeout: float = 10.0
    idle_timeout: float = 30.0
    send_timeout: float = 60.0
    max_header_bytes: int = 16384
    max_headers: int = 100

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_header_bytes", "max_headers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("header_timeout", "idle_timeout", "send_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {getattr(self, name)}")


@dataclass(frozen=True)
class Request:
    """One request's head: `method` and `version` as sent, `path` (percent-escapes kept) and `query`
    split from the target, `headers` with lower-case names, `client` the peer address."""

    method: str
    target: str
    path: str
    query: str
    version: str
    headers: dict[str, str]
    client: str


@dataclass(frozen=True)
class Reply:
    """A whole response: `body` is sent with a Content-Length (not for HEAD), after `headers`."""

    status: int
    body: bytes = b""
    content_type: str = "text/plain"
    headers: tuple[tuple[str, str], ...] = field(default=())
    length: int | None = None  # the Content-Length when it is not len(body) (a HEAD answered without the body)


#: A handler: `handler(request, connection)` returns a `Reply`, or an awaitable that streams the
#: response itself (`Connection.start`, `write`, `sendfile`) and returns the status it sent.
Handler = Callable[[Request, "Connection"], "Reply | Awaitable[int]"]


class _Clock:
    """The Date header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._text = b""

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._text = formatdate(now, usegmt=True).encode()
        return self._text


_CLOCK = _Clock()


class Connection(asyncio.Protocol):
    """One client connection: reads request heads, runs the handler, writes the responses in order."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.client = "-"
        self._buffer = bytearray()
        self._closed = False
        self._busy = False  # a response is being produced
        self._discard = 0  # body bytes still to drop before answering
        self._after_discard: Reply | None = None
        self._keep_alive = True
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.deadline = 0.0
        self._counted = False
        self._peer_done = False  # the client half-closed: no more requests will come
        self.sent = 0  # body bytes of the current response

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if isinstance(peer, tuple) else str(peer or "-")
        refused = self.server._admit(self)
        if refused:
            self._closed = True
            transport.write(self._head(503, b"text/plain", len(refused), close=True) + refused)
            transport.close()
            return
        self._counted = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=1 << 20, low=1 << 18)
        self.deadline = self.loop.time() + self.server.limits.idle_timeout

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closed = True
        self._can_write.set()  # a writer waiting for the client wakes and sees the end
        if self._counted:
            self._counted = False
            self.server._release(self)

    def eof_received(self) -> bool:
        """The client has sent all it will (a half-close): answer what it sent, then close."""
        self._peer_done = True
        if not self._busy:
            self._next_request()
        return True  # keep the transport open for writing

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        if self._discard:
            take = min(self._discard, len(data))
            self._discard -= take
            data = data[take:]
            if self._discard:
                return
            reply, self._after_discard = self._after_discard, None
            assert reply is not None
            self._finish_reply(reply, self.request)
            self._next_request()
        if not data:
            return
        if not self._buffer and not self._busy:  # the first byte of a request head: it has this long
            self.deadline = self.loop.time() + self.server.limits.header_timeout
        self._buffer += data
        if self._busy:  # a pipelined request waits until this response is out
            if len(self._buffer) > self.server.limits.max_header_bytes:
                self.transport.pause_reading()
            return
        self._next_request()

    # -- requests -------------------------------------------------------------------------------

    def _next_request(self) -> None:
        """Answer the complete request heads in the buffer, one after another, until one streams.

        Once the client has half-closed and nothing is under way, the connection is closed (an
        incomplete head can never be completed).
        """
        self._answer_buffered()
        if self._peer_done and not self._busy and not self._closed:
            self._closed = True
            self.transport.close()

    def _answer_buffered(self) -> None:
        while not self._busy and not self._closed and not self._discard:
            end = self._buffer.find(b"\r\n\r\n")
            if end == -1:
                if self._buffer.strip(b"\r\n") == b"":
                    self._buffer.clear()  # CRLF before a request is allowed (RFC 9112 section 2.2)
                elif len(self._buffer) > self.server.limits.max_header_bytes:
                    self._refuse(431, b"request head too large\n")
                return
            if end > self.server.limits.max_header_bytes:
                self._refuse(431, b"request head too large\n")
                return
            head = bytes(self._buffer[:end])
            del self._buffer[: end + 4]
            request = self._parse(head.lstrip(b"\r\n"))
            if request is None:
                return
            self._dispatch(request)

    def _parse(self, head: bytes) -> Request | None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
            self._refuse(400, b"malformed request line\n")
            return None
        method_b, target_b, version_b = parts
        if version_b not in (b"HTTP/1.1", b"HTTP/1.0"):
            if version_b.startswith(b"HTTP/"):
                self._refuse(505, b"only HTTP/1.0 and HTTP/1.1\n")
            else:
                self._refuse(400, b"malformed request line\n")
            return None
        if len(lines) - 1 > self.server.limits.max_headers:
            self._refuse(431, b"too many header fields\n")
            return None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name) or _CONTROL.search(value):
                self._refuse(400, b"malformed header field\n")
                return None
            key = name.decode("ascii").lower()
            text = value.strip(b" \t").decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        try:
            target = target_b.decode("ascii")
        except UnicodeDecodeError:
            self._refuse(400, b"the request target is not ASCII\n")
            return None
        if _NOT_IN_TARGET.search(target):
            self._refuse(400, b"malformed request target\n")
            return None
        version = version_b.decode()
        if version == "HTTP/1.1" and "host" not in headers:
            self._refuse(400, b"HTTP/1.1 requests need a Host header field\n")
            return None
        if target.startswith(("http://", "https://")):  # absolute form: keep the path
            rest = target.split("://", 1)[1]
            target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        path, _, query = target.partition("?")
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self._keep_alive = "keep-alive" in connection
        else:
            self._keep_alive = "close" not in connection
        return Request(method_b.decode("ascii"), target, path, query, version, headers, self.client)

    def _dispatch(self, request: Request) -> None:
        self._busy = True
        self.sent = 0
        self.method = request.method
        self.request = request
        self.deadline = self.loop.time() + self.server.limits.send_timeout
        if "transfer-encoding" in request.headers:
            self._refuse(400, b"request bodies with a Transfer-Encoding are not accepted\n", request)
            return
        length_text = request.headers.get("content-length", "0")
        if not (length_text.isascii() and length_text.isdigit()):
            self._refuse(400, b"malformed Content-Length\n", request)
            return
        length = int(length_text)
        if length and request.method in ("GET", "HEAD"):
            self._refuse(400, b"GET and HEAD requests have no body here\n", request)
            return
        try:
            result = self.server.handler(request, self)
        except Exception as error:  # a handler bug: one line in the log, 500 to the client
            self.server.report(f"error handling {request.method} {request.target}: {type(error).__name__}: {error}")
            self._refuse(500, b"internal error\n", request)
            return
        if isinstance(result, Reply):
            if length:
                if length > MAX_DISCARDED_BODY or "expect" in request.headers:
                    self._keep_alive = False
                    self._finish_reply(result, request)
                    return
                self._discard = length
                take = min(length, len(self._buffer))
                del self._buffer[:take]
                self._discard -= take
                if self._discard:
                    self._after_discard = result
                    return
            self._finish_reply(result, request)
            return
        self.loop.create_task(self._stream(request, result))

    async def _stream(self, request: Request, work: Awaitable[int]) -> None:
        status = 0
        try:
            status = await work
        except (ConnectionError, asyncio.TimeoutError, asyncio.CancelledError):
            self.abort()
        except Exception as error:  # the store changed under the response (OSError), or a handler bug
            what = "sending" if isinstance(error, OSError) else "handling"
            self.server.report(f"error {what} {request.method} {request.target}: {type(error).__name__}: {error}")
            if self._head_sent:
                self.abort()  # part of a response went out: the client must see it cut short
            else:
                self._keep_alive = False
                self._write_reply(Reply(500, b"internal error\n"))
                status = 500
        self.server.log_request(request, status or 0, self.sent)
        self._response_done()
        self._next_request()

    def _finish_reply(self, reply: Reply, request: Request | str) -> None:
        self._write_reply(reply)
        if isinstance(request, Request):
            self.server.log_request(request, reply.status, len(reply.body))
        self._response_done()

    def _write_reply(self, reply: Reply) -> None:
        if self._closed:
            return
        body = b"" if self.method == "HEAD" else reply.body
        head = self.encode_head(reply.status, reply.content_type,
                                len(reply.body) if reply.length is None else reply.length, reply.headers)
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)

    def _response_done(self) -> None:
        """A response is out: close, or wait for the next request (the caller reads the buffer on)."""
        self._busy = False
        self._head_sent = False
        if self._closed:
            return
        if not self._keep_alive:
            self._closed = True
            self.transport.close()  # after what is buffered is sent
            return
        limits = self.server.limits
        self.deadline = self.loop.time() + (limits.header_timeout if self._buffer else limits.idle_timeout)
        self.transport.resume_reading()

    def _refuse(self, status: int, body: bytes, request: Request | None = None) -> None:
        """Answer `status` and close the connection (the request cannot be read further)."""
        self._keep_alive = False
        self.method = request.method if request is not None else "GET"
        self._buffer.clear()
        self._busy = True
        self._write_reply(Reply(status, body))
        if request is not None:
            self.server.log_request(request, status, len(body))
        else:
            self.server.log_line(f'{self.client} "-" {status} {len(body)}')
        self._response_done()

    def timed_out(self) -> None:
        """Called by the server's sweeper once `deadline` has passed."""
        if self._closed:
            return
        if self._busy:
            self.abort()  # a client that stopped reading: cut the response off
        elif self._buffer:
            self._refuse(408, b"request head not received in time\n")
        else:
            self._closed = True
            self.transport.close()  # an idle keep-alive connection

    # -- writing a streamed response ---------------------------------------------------------------

    _head_sent = False
    method = "GET"

    def encode_head(self, status: int, content_type: str, length: int | None,
                    headers: Iterable[tuple[str, str]] = ()) -> bytes:
        """The status line and header fields of a response (with Date, Content-Length, Connection)."""
        return self._head(status, content_type.encode(), length, close=not self._keep_alive, headers=headers)

    def _head(self, status: int, content_type: bytes, length: int | None, *, close: bool,
              headers: Iterable[tuple[str, str]] = ()) -> bytes:
        lines = [b"HTTP/1.1 %d %s\r\nServer: %s\r\nDate: %s\r\nContent-Type: %s\r\n"
                 % (status, _REASONS.get(status, "Unknown").encode(), self.server.name, _CLOCK.date(), content_type)]
        if length is not None:
            lines.append(b"Content-Length: %d\r\n" % length)
        for name, value in headers:
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if close:
            lines.append(b"Connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    def start(self, status: int, content_type: str, length: int | None, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Write the head of a streamed response (without a `length` the connection closes after it)."""
        if length is None:
            self._keep_alive = False
        self._head_sent = True
        if not self._closed:
            self.transport.write(self.encode_head(status, content_type, length, headers))

    def write_now(self, data: bytes) -> None:
        """Send a small body after `start` without waiting (not for HEAD: nothing is sent then)."""
        if data and self.method != "HEAD" and not self._closed:
            self.transport.write(data)
            self.sent += len(data)

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send `data`, waiting while the client is behind; ConnectionError once it has gone."""
        if self._closed:
            raise ConnectionError("the client closed the connection")
        self.transport.write(data)
        self.sent += len(data)
        if not self._can_write.is_set():
            await self._can_write.wait()
            if self._closed:
                raise ConnectionError("the client closed the connection")
        self.deadline = self.loop.time() + self.server.limits.send_timeout

    async def sendfile(self, file: BinaryIO, offset: int, count: int) -> int:
        """Send `count` bytes of `file` from `offset` with the kernel's sendfile where it can; returns the bytes sent.

        Sent in slices of 8 MiB, each given `Limits.send_timeout` seconds (asyncio.TimeoutError).
        """
        done = 0
        while done < count:
            if self._closed:
                raise ConnectionError("the client closed the connection")
            piece = min(count - done, 8 << 20)
            sent = await asyncio.wait_for(self.loop.sendfile(self.transport, file, offset + done, piece),
                                          self.server.limits.send_timeout)
            if sent == 0:
                break  # the file is shorter than it was
            done += sent
            self.sent += sent
            self.deadline = self.loop.time() + self.server.limits.send_timeout
        return done

    def touch(self) -> None:
        """The response made progress: the client has `Limits.send_timeout` seconds again."""
        self.deadline = self.loop.time() + self.server.limits.send_timeout

    def hold(self) -> None:
        """The server, not the client, is working (compressing, say): no deadline until `touch`."""
        self.deadline = float("inf")

    def abort(self) -> None:
        """Reset the connection at once (a response cut short: the client sees a short body).

        With SO_LINGER 0, so what the kernel still holds for a client that stopped reading
        is dropped with the connection instead of trickling out after it.
        """
        self._keep_alive = False
        if not self._closed:
            self._closed = True
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            self.transport.abort()


class HTTPServer:
    """Serves `handler` on `host`:`port` (0: a free port) within `limits`; bound when constructed.

    `log(line)` gets one line per request and per error (None: nothing is logged). Raises
    OSError if the address cannot be bound.
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 8080, *, limits: Limits | None = None,
                 log: Callable[[str], None] | None = None, name: str = "cudapkgs-serve",
                 on_close: Callable[[], None] | None = None) -> None:
        self.handler = handler
        self.limits = limits or Limits()
        self.log = log
        self.name = name.encode()
        self._on_close = on_close
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=min(1024, self.limits.max_connections * 2),
                                           reuse_port=False)
        self.server_address = self.socket.getsockname()
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(self._loop_error)
        self.connections: set[Connection] = set()
        self._per_client: dict[str, int] = {}
        self._stop: asyncio.Future[None] | None = None
        self._running = threading.Event()
        self._finished = threading.Event()
        self._finished.set()
        self._shutdown_requested = False
        self._closed = False

    # -- admission -------------------------------------------------------------------------------

    def _admit(self, conn: Connection) -> bytes | None:
        """None if `conn` may stay; else the body of the 503 it gets."""
        if len(self.connections) >= self.limits.max_connections:
            self.log_line(f"{conn.client} refused: {len(self.connections)} connections open (the limit)")
            return b"too many connections; try again later\n"
        per = self._per_client.get(conn.client, 0)
        if self.limits.max_per_client is not None and per >= self.limits.max_per_client:
            self.log_line(f"{conn.client} refused: {per} connections open from it (the limit)")
            return b"too many connections from this address; try again later\n"
        self.connections.add(conn)
        self._per_client[conn.client] = per + 1
        return None

    def _release(self, conn: Connection) -> None:
        self.connections.discard(conn)
        left = self._per_client.get(conn.client, 1) - 1
        if left > 0:
            self._per_client[conn.client] = left
        else:
            self._per_client.pop(conn.client, None)

    def _sweep(self) -> None:
        now = self.loop.time()
        for conn in [c for c in self.connections if c.deadline <= now]:
            conn.timed_out()
        self.loop.call_later(self._sweep_every, self._sweep)

    @property
    def _sweep_every(self) -> float:
        shortest = min(self.limits.header_timeout, self.limits.idle_timeout, self.limits.send_timeout)
        return max(0.02, min(1.0, shortest / 4))

    # -- logging ---------------------------------------------------------------------------------

    def log_request(self, request: Request, status: int, size: int) -> None:
        if self.log is not None:
            self.log(f'{request.client} "{request.method} {request.target} {request.version}" {status} {size}')

    def log_line(self, line: str) -> None:
        if self.log is not None:
            self.log(line)

    def report(self, line: str) -> None:
        """An error worth a line even in a quiet server (the command line prints it on stderr)."""
        self.log_line(line)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, (ConnectionError, TimeoutError)):
            return  # a client that went away
        self.report(f"serve: {context.get('message', 'error')}" + (f": {type(error).__name__}: {error}" if error else ""))

    # -- running ---------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Serve until `shutdown` is called (from another thread) or KeyboardInterrupt."""
        if self._closed:
            raise RuntimeError("the server is closed")
        self._finished.clear()
        try:
            asyncio.set_event_loop(self.loop)
            self._stop = self.loop.create_future()
            server = self.loop.run_until_complete(self.loop.create_server(
                lambda: Connection(self), sock=self.socket, backlog=min(1024, self.limits.max_connections * 2)))
            self.loop.call_later(self._sweep_every, self._sweep)
            self._running.set()
            if self._shutdown_requested:
                self._stop.set_result(None)
            try:
                self.loop.run_until_complete(self._stop)
            finally:
                server.close()
                for conn in list(self.connections):
                    conn.abort()
                self.loop.run_until_complete(asyncio.sleep(0))
        finally:
            self._running.clear()
            self._finished.set()

    def shutdown(self) -> None:
        """Stop `serve_forever` and wait until it has returned (call from another thread)."""
        self._shutdown_requested = True
        if self._stop is not None and not self.loop.is_closed():
            def stop() -> None:
                if self._stop is not None and not self._stop.done():
                    self._stop.set_result(None)

            try:
                self.loop.call_soon_threadsafe(stop)
            except RuntimeError:
                pass
        self._finished.wait()

    def server_close(self) -> None:
        """Close the listening socket, the event loop and what the handler opened (`on_close`)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.socket.close()
        except OSError:
            pass
        if not self.loop.is_running():
            self.loop.close()
        if self._on_close is not None:
            self._on_close()

