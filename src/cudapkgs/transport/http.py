"""The one HTTP client: every download, upload and binary-cache transfer goes through `request`.

Built on urllib3 (already in the dependency closure through botocore; see docs/architecture.md):

* one process-wide `Client` (`default_client()`) with a pool of kept-alive connections per host,
  so a closure's narinfos and NARs reuse a handful of connections instead of one each;
* every object has a byte bound (`Limits.max_bytes`, which the caller derives from what it trusts:
  a manifest's size, a signed NarSize) and a deadline for the whole transfer, besides the connect
  and read timeouts; a peer that sends slower than `Limits.low_speed_bps` for `low_speed_s`
  seconds is cut too (curl's ``--speed-limit``/``--speed-time``, Nix's stalled-download timeout);
* proxies and CA certificates as curl and Nix take them from the environment (`environment`);
* credentials in the URL (``https://user:pass@host/…``) are sent as HTTP basic auth, to that
  host only (a redirect elsewhere drops them); they never appear in a message;
* redirects (301, 302, 303, 307, 308; at most 5) are followed for GET and HEAD;
* transient failures (timeouts, resets, truncated bodies, refused connections, 408, 429, 5xx)
  are retried with exponential backoff (`retry`), within the object's deadline;
* every failure is a `TransferError` whose message is one line naming the URL.

Importing this module loads urllib3, ``ssl`` and ``http.client``: import it in the function that
transfers, never at a module's top (start-up of ``cudapkgs eval`` and of a cached build).
"""

from __future__ import annotations

import base64
import errno
import http.client
import os
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from urllib3 import connection as _connection
from urllib3 import connectionpool as _pools
from urllib3 import exceptions as _exc
from urllib3.util import Timeout

from . import deadline as _deadline
from .deadline import DEADLINE_BASE_S, DEADLINE_FLOOR_BPS, deadline_for
from . import environment
from .errors import DeadlineExceeded, StatusError, TooLarge, TransferError

__all__ = ["CHUNK", "DEADLINE_BASE_S", "DEADLINE_FLOOR_BPS", "Client", "Limits", "Response", "deadline_for", "default_client", "get_bytes", "request", "retry",
           "shown_url", "status_error"]

#: Bytes asked of the socket per read.
CHUNK = 1 << 20
#: Statuses worth asking again (curl's ``--retry`` set: RFC 9110 408/429 and the 5xx of an overloaded server).
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_REDIRECTS = 5
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: An error body this small is read to the end so that its connection can be reused (404s of cache misses).
_SMALL_BODY = 64 << 10
_RETRY_AFTER_MAX_S = 60.0

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """What one object may cost: bytes, and seconds (connect, silence, whole transfer, stall).

    `max_bytes` bounds the response body (TooLarge past it, or at once when Content-Length declares
    more). `connect_s` bounds connecting (TCP, proxy, TLS), `read_s` any one silence. `deadline_s`
    bounds the whole transfer, from the request until the last byte (default: `deadline_for(max_bytes)`).
    A response slower than `low_speed_bps` bytes/s over `low_speed_s` seconds of waiting is cut.
    """

    max_bytes: int
    connect_s: float = 15.0
    read_s: float = 30.0
    deadline_s: float | None = None
    low_speed_bps: int = 1024
    low_speed_s: float = 30.0

    def deadline_seconds(self) -> float:
        """The deadline in seconds from now (`deadline_s`, or one derived from `max_bytes`)."""
        return self.deadline_s if self.deadline_s is not None else deadline_for(self.max_bytes)


# -- connections that tell the watchdog their sockets ---------------------------------------------


class _Watched:
    """Mixed into urllib3's connection classes: a socket opened or reused under a `deadline.current`
    watch is attached to it, so a deadline ends a blocked connect, handshake, send or receive."""

    def _new_conn(self):  # type: ignore[no-untyped-def]
        sock = super()._new_conn()  # type: ignore[misc]
        _deadline.attach(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _deadline.attach(getattr(self, "sock", None))  # a kept-alive connection, or the TLS socket after connect
        return super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedContext(ssl.SSLContext):
    """Attaches a TLS socket to the current watch before its handshake: wrapping detaches the TCP
    socket attached at connect, so without this a handshake that never ends would escape the deadline."""

    def wrap_socket(self, sock, *args: Any, do_handshake_on_connect: bool = True, **kwargs: Any):  # type: ignore[override]
        tls = super().wrap_socket(sock, *args, do_handshake_on_connect=False, **kwargs)
        _deadline.attach(tls)
        if do_handshake_on_connect:
            tls.do_handshake()
        return tls


class _HTTPConnection(_Watched, _connection.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, _connection.HTTPSConnection):
    pass


class _HTTPPool(_pools.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(_pools.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOL_CLASSES = {"http": _HTTPPool, "https": _HTTPSPool}


@dataclass(frozen=True)
class _Target:
    url: str  # without credentials: what is requested and what messages show
    scheme: str
    host: str
    port: int | None
    authorization: str | None


def _target(url: str) -> _Target:
    parts = urllib.parse.urlsplit(url)
    shown = _without_credentials(parts)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TransferError(shown, "not an http:// or https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise TransferError(shown, "the port is not a number from 0 to 65535") from None
    authorization = None
    if parts.username is not None:
        token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(token.encode()).decode()
    return _Target(shown, parts.scheme, parts.hostname, port, authorization)


def shown_url(url: str) -> str:
    """`url` as messages show it: without credentials (``https://user:pass@host/x`` -> ``https://host/x``)."""
    return _without_credentials(urllib.parse.urlsplit(url))


def _without_credentials(parts: urllib.parse.SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


# -- the client ----------------------------------------------------------------------------------


class Client:
    """Pools of kept-alive connections (one manager per proxy) and the TLS settings; thread-safe.

    Most code uses `default_client()`; a `Client` of its own suits a test or a caller wanting
    other pool sizes. `pool_size` connections per host are kept (more may open; those are closed after use).
    """

    def __init__(self, *, pool_size: int = 16) -> None:
        self.pool_size = pool_size
        self._managers: dict[tuple[str | None, str | None, bool], urllib3.PoolManager] = {}
        self._contexts: dict[str | None, ssl.SSLContext] = {}
        self._lock = threading.Lock()
        _CLIENTS.add(self)  # a forked child forgets its pools (`_after_fork_in_child`)

    def _forget_after_fork(self) -> None:
        """In a forked child: the connections are the parent's (dropped, never shut down: that would end
        the parent's too), the lock perhaps held by a parent's thread. New ones are made on demand."""
        self._managers = {}
        self._lock = threading.Lock()

    def _ssl_context(self, cafile: str | None) -> ssl.SSLContext:
        context = self._contexts.get(cafile)
        if context is None:
            # ssl.create_default_context's client settings: hostname checked, certificate required.
            context = _WatchedContext(ssl.PROTOCOL_TLS_CLIENT)
            if cafile:
                context.load_verify_locations(cafile=cafile)
            else:
                context.load_default_certs()
            self._contexts[cafile] = context
        return context

    def _manager(self, proxy: str | None, cafile: str | None, tls: bool) -> urllib3.PoolManager:
        """The pools for requests through `proxy` (None: direct); with `tls`, for https:// or an https proxy
        (loading CA certificates costs tens of milliseconds: plain http:// never pays it)."""
        key = (proxy, cafile if tls else None, tls)
        with self._lock:
            manager = self._managers.get(key)
            if manager is not None:
                return manager
            options: dict[str, Any] = {"num_pools": 32, "maxsize": self.pool_size, "block": False, "blocksize": CHUNK}
            context = self._ssl_context(cafile) if tls else None
            if context is not None:
                options["ssl_context"] = context
            if proxy is None:
                manager = urllib3.PoolManager(**options)
            else:
                parsed = urllib3.util.parse_url(proxy)
                headers = {}
                if parsed.auth:
                    headers = urllib3.make_headers(proxy_basic_auth=urllib.parse.unquote(parsed.auth))
                bare = parsed._replace(auth=None).url
                manager = urllib3.ProxyManager(bare, proxy_headers=headers,
                                               proxy_ssl_context=context if parsed.scheme == "https" else None, **options)
            manager.pool_classes_by_scheme = _POOL_CLASSES  # type: ignore[assignment]
            self._managers[key] = manager
            return manager

    def request(
        self,
        method: str,
        url: str,
        *,
        limits: Limits,
        headers: Mapping[str, str] | None = None,
        body: bytes | Any = None,
        deadline: float | None = None,
        attempts: int = 1,
        backoff_s: float = 1.0,
    ) -> Response:
        """Send `method` `url` and return the `Response` once its headers are in (read its body, then close it).

        `body` is bytes or a seekable binary file (rewound for a retry). `deadline` is an absolute
        `time.monotonic()` value (default: now + `limits.deadline_seconds()`), shared by the retries
        and the body's reading. Redirects are followed for GET and HEAD. A status in `RETRY_STATUSES`
        is retried, and raises `StatusError` after the last attempt; any other status is returned for
        the caller to judge. Raises `TransferError` (`DeadlineExceeded`, `TooLarge`, `StatusError`).
        """
        target = _target(url)
        if deadline is None:
            deadline = time.monotonic() + limits.deadline_seconds()
        start = body.tell() if hasattr(body, "seek") else None
        base = {"User-Agent": _user_agent(), "Accept-Encoding": "identity", **(headers or {})}

        def once() -> Response:
            current, sent = target, dict(base)
            if current.authorization and "Authorization" not in sent:
                sent["Authorization"] = current.authorization
            for _hop in range(MAX_REDIRECTS + 1):
                if start is not None:
                    body.seek(start)
                response = self._send(method, current, sent, body, limits, deadline)
                location = response.headers.get("Location")
                if response.status in _REDIRECTS and location and method in ("GET", "HEAD"):
                    response.discard()
                    following = _target(urllib.parse.urljoin(current.url, location))
                    if (following.scheme, following.host, following.port) != (current.scheme, current.host, current.port):
                        sent.pop("Authorization", None)  # credentials go to the host they were given for
                        if following.authorization:
                            sent["Authorization"] = following.authorization
                    current = following
                    continue
                if response.status in RETRY_STATUSES:
                    response.discard()
                    raise _status_error(response, transient=True)
                return response
            raise TransferError(target.url, f"more than {MAX_REDIRECTS} redirects")

        return retry(once, attempts=attempts, backoff_s=backoff_s, deadline=deadline)

    def _send(self, method: str, target: _Target, headers: dict[str, str], body: Any, limits: Limits,
              deadline: float) -> Response:
        try:
            proxy = environment.proxy_for(target.scheme, target.host)
            tls = target.scheme == "https" or bool(proxy and proxy[0].startswith("https:"))
            cafile = environment.ca_file() if tls else None
        except TransferError as error:
            raise TransferError(target.url, error.reason) from None
        manager = self._manager(proxy[0] if proxy else None, cafile, tls)
        watch = _deadline.watch(deadline)
        remaining = watch.remaining()
        if remaining <= 0:
            watch.close()
            raise DeadlineExceeded(target.url, "its deadline passed before it could be asked for")
        # The watchdog ends the transfer at the deadline; the socket timeouts get a little slack past it
        # so that the deadline, not a timeout racing it, is what a late transfer reports.
        timeout = Timeout(connect=min(limits.connect_s, remaining + 1.0), read=min(limits.read_s, remaining + 1.0))
        try:
            with _deadline.current(watch):
                raw = manager.urlopen(method, target.url, body=body, headers=headers, retries=False, redirect=False,
                                      timeout=timeout, preload_content=False, decode_content=False,
                                      assert_same_host=False)
        except (_exc.HTTPError, OSError, http.client.HTTPException, ValueError) as error:
            expired = watch.close() or time.monotonic() >= deadline
            raise _translate(error, target, expired, limits, proxy) from None
        response = Response(raw, target.url, watch, limits, method)
        declared = raw.headers.get("Content-Length", "")
        if method != "HEAD" and declared.isascii() and declared.isdigit() and int(declared) > limits.max_bytes \
                and response.status < 300:
            response.close()
            raise TooLarge(target.url, f"declares {int(declared)} bytes, more than the {limits.max_bytes} allowed for it")
        return response


class Response:
    """A response whose headers are in: `status`, `reason`, `headers`; read its body with `read`/`read1`.

    Reading past `Limits.max_bytes` raises `TooLarge`; past the deadline `DeadlineExceeded`; a broken
    connection or a stall a transient `TransferError`. Reading to the end gives the connection back
    to the pool; `close()` before the end closes it. Use it as a context manager.
    """

    def __init__(self, raw: urllib3.HTTPResponse, url: str, watch: _deadline.Watch, limits: Limits, method: str) -> None:
        self._raw = raw
        self.url = url
        self.status: int = raw.status
        self.reason: str = raw.reason or http.client.responses.get(raw.status, "")
        self.headers = raw.headers
        self.received = 0
        self._watch = watch
        self._limits = limits
        self._eof = method == "HEAD"
        self._closed = False
        self._waited = 0.0
        self._window_bytes = 0
        self._stall: Any = None  # the in-read low-speed check, made by the first bulk read (`transport.stall`)
        if self._eof:
            self._finish()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def readable(self) -> bool:
        return True

    def read1(self, n: int = CHUNK) -> bytes:
        """Up to `n` bytes from one receive (b"" at the end of the body).

        Each receive is checked against the low-speed rule, so a peer dripping bytes is cut after
        `Limits.low_speed_s`: for small objects (a narinfo). Bulk transfers use `read`, which costs
        far less per byte (over TLS a receive brings one 16 KiB record).
        """
        return self._next(n, bulk=False)

    def read(self, n: int = -1) -> bytes:
        """`n` bytes, fewer only at the end of the body; the whole (bounded) body when `n` is -1 or None.

        One call gathers many receives in C; the low-speed rule is checked when it returns and, while
        it waits, by `transport.stall` (a peer dripping bytes into one call is cut after
        `Limits.low_speed_s`, not when the call would end), besides the deadline and `Limits.read_s`.
        """
        if n is not None and n >= 0:
            return self._next(n, bulk=True)
        parts: list[bytes] = []
        while data := self._next(CHUNK, bulk=True):
            parts.append(data)
        return b"".join(parts)

    def readinto(self, buffer: bytearray | memoryview) -> int:
        """Fill `buffer` as `read(len(buffer))` would, returning the bytes put there (0 at the end of the body).

        The bytes go from the socket straight into `buffer` (http.client's ``readinto``: no bytes object
        per call, no copy), with every check `read` makes: the byte bound, the deadline, the low-speed
        rule, and a body that ends before its Content-Length is a broken connection, never an end.
        A response whose body urllib3 would have to decode (none here: bodies are asked undecoded)
        or that urllib3 has buffered goes through `read` and one copy.
        """
        view = memoryview(buffer).cast("B")
        if self._eof or self._closed or not len(view):
            return 0
        want = max(1, min(len(view), self._limits.max_bytes - self.received + 1))
        raw = self._raw
        fp = getattr(raw, "_fp", None)  # urllib3 2's http.client response: its readinto fills the caller's buffer
        into = getattr(fp, "readinto", None)
        if into is None or getattr(raw, "_decoder", None) is not None or len(getattr(raw, "_decoded_buffer", ())):
            data = self._next(want, bulk=True)
            view[: len(data)] = data
            return len(data)

        def fill() -> int:
            n = into(view[:want])
            if n and raw.length_remaining is not None:  # urllib3's own count, as its read keeps it
                raw.length_remaining -= n
            if not n and raw.length_remaining:  # http.client returns 0 at a premature end: a cut, not the end
                raise http.client.IncompleteRead(b"", raw.length_remaining)
            return n

        return self._receive(fill, bulk=True)

    def _next(self, n: int, *, bulk: bool) -> bytes:
        if self._eof or self._closed:
            return b""
        if n is None or n < 0 or n > CHUNK:
            n = CHUNK
        want = max(1, min(n, self._limits.max_bytes - self.received + 1))
        if bulk:
            got = self._receive(lambda: self._raw.read(want, decode_content=False), bulk=True)
        else:
            got = self._receive(lambda: self._raw.read1(want, decode_content=False))
        return got or b""

    def _receive(self, receive: Callable[[], Any], *, bulk: bool = False) -> Any:
        """`receive()` (bytes, or a count of bytes put in a buffer) under the deadline, byte bound and low-speed
        rule; a `bulk` receive (many receives in one call) also under the rule while it waits (`transport.stall`)."""
        if self._watch.expired:
            self._give_up(DeadlineExceeded(self.url, self._late()))
        stall = self._stall
        if bulk and stall is None:
            from .stall import StallGuard

            stall = self._stall = StallGuard(self._raw, self._limits.low_speed_bps, self._limits.low_speed_s, self._watch)
        began = time.monotonic()
        if stall is not None:
            stall.begin()
        try:
            data = receive()
        except (_exc.HTTPError, OSError, http.client.HTTPException, ValueError) as error:
            if self._watch.expired:
                self._give_up(DeadlineExceeded(self.url, self._late()))
            if stall is not None and stall.stalled:
                self._give_up(self._stalled(stall.stalled))
            self._give_up(TransferError(self.url, f"the connection broke after {self.received} bytes ({_cause(error)})",
                                        transient=True))
        finally:
            if stall is not None:
                stall.end()
        if stall is not None and stall.stalled:  # the guard cut the socket: what came is not the body's end
            self._give_up(self._stalled(stall.stalled))
        if not data:
            if self._watch.close():  # the deadline cut the socket: this end is not the body's
                self._give_up(DeadlineExceeded(self.url, self._late()))
            self._eof = True
            self._finish()
            return data
        got = data if isinstance(data, int) else len(data)
        self.received += got
        if self.received > self._limits.max_bytes:
            self._give_up(TooLarge(self.url, f"sent more than the {self._limits.max_bytes} bytes allowed for it"))
        if self._watch.expired:  # a read cut short by the deadline returns what it had
            self._give_up(DeadlineExceeded(self.url, self._late()))
        self._check_speed(time.monotonic() - began, got)
        return data

    def discard(self) -> None:
        """Close, first reading the rest of a small body (a 404 page) so that the connection is reused."""
        if not self._eof and not self._closed:
            left = self.headers.get("Content-Length", "")
            if left.isascii() and left.isdigit() and int(left) <= _SMALL_BODY:
                try:
                    while self.read1():
                        pass
                except TransferError:
                    pass
        self.close()

    def close(self) -> None:
        """Give the connection back (body read to its end) or close it (body left unread)."""
        if self._closed:
            return
        self._closed = True
        if self._stall is not None:
            self._stall.close()
        expired = self._watch.close()
        if not self._eof or expired:
            self._raw.close()
        self._raw.release_conn()

    def _finish(self) -> None:
        if self._stall is not None:
            self._stall.close()
        if not self._watch.close():
            self._raw.release_conn()

    def _stalled(self, what: str) -> TransferError:
        return TransferError(self.url, f"{what} ({self.received} bytes received)", transient=True)

    def _give_up(self, error: TransferError) -> None:
        self._closed = True
        if self._stall is not None:
            self._stall.close()
        self._watch.close()
        self._raw.close()
        self._raw.release_conn()
        raise error

    def _late(self) -> str:
        return f"took longer than its deadline ({self.received} bytes received)"

    def _check_speed(self, waited: float, got: int) -> None:
        self._waited += waited
        self._window_bytes += got
        if self._waited >= self._limits.low_speed_s:
            if self._window_bytes < self._limits.low_speed_bps * self._waited:
                self._give_up(TransferError(
                    self.url, f"stalled: {self._window_bytes} bytes in {self._waited:.0f} s of waiting, slower than "
                    f"{self._limits.low_speed_bps} bytes/s ({self.received} bytes received)", transient=True))
            self._waited = 0.0
            self._window_bytes = 0


# -- retries and errors ---------------------------------------------------------------------------


def retry(operation: Callable[[], T], *, attempts: int, backoff_s: float, deadline: float | None = None,
          sleep: Callable[[float], None] | None = None) -> T:
    """`operation()`, tried again after a transient `TransferError` up to `attempts` times in all.

    The i-th retry waits `backoff_s * 2**(i-1)` seconds, or a server's Retry-After (at most 60 s)
    when longer; no retry starts that could not finish its wait before `deadline`. The error of
    the last attempt is raised, saying how many were made.
    """
    sleep = sleep or time.sleep
    attempt = 0
    while True:
        attempt += 1
        try:
            return operation()
        except TransferError as error:
            if not error.transient or attempt >= max(1, attempts):
                raise error.after(attempt) from None
            delay = max(backoff_s * 2 ** (attempt - 1), getattr(error, "retry_after", 0.0))
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise error.after(attempt) from None
            sleep(delay)


def _status_error(response: Response, *, transient: bool) -> StatusError:
    error = StatusError(response.url, f"HTTP {response.status} {response.reason}".rstrip(), transient=transient,
                        status=response.status)
    after = response.headers.get("Retry-After", "").strip()
    error.retry_after = min(float(after), _RETRY_AFTER_MAX_S) if after.isascii() and after.isdigit() else 0.0  # type: ignore[attr-defined]
    return error


def status_error(response: Response) -> StatusError:
    """The one-line `StatusError` for a response the caller does not accept ("<url>: HTTP 404 Not Found")."""
    return _status_error(response, transient=response.status in RETRY_STATUSES)


def _translate(error: BaseException, target: _Target, expired: bool, limits: Limits,
               proxy: tuple[str, str] | None) -> TransferError:
    url = target.url
    if expired:
        return DeadlineExceeded(url, "took longer than its deadline (nothing received)")
    if isinstance(error, _exc.NameResolutionError):
        return TransferError(url, f"cannot resolve {target.host} ({_cause(error)})")
    if isinstance(error, _exc.ProxyError):
        name = f"{_shown_proxy(proxy[0])} ({proxy[1]})" if proxy else "the proxy"
        return TransferError(url, f"the proxy {name} failed: {_cause(error)}", transient=True)
    if isinstance(error, _exc.NewConnectionError):  # before ConnectTimeoutError: urllib3 derives it from that
        refused = isinstance(error.__cause__ or error.__context__, ConnectionRefusedError) or "refused" in str(error)
        return TransferError(url, "connection refused" if refused else _cause(error), transient=True)
    if isinstance(error, _exc.ConnectTimeoutError):
        return TransferError(url, f"no connection within {limits.connect_s:g} s", transient=True)
    if isinstance(error, (_exc.ReadTimeoutError, socket.timeout)):
        return TransferError(url, f"no answer within {limits.read_s:g} s", transient=True)
    if isinstance(error, (_exc.SSLError, ssl.SSLError)):
        text = _cause(error)
        if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
            return TransferError(url, f"its TLS certificate is not trusted ({text}); if a private CA signed it, "
                                 "name its bundle in NIX_SSL_CERT_FILE or SSL_CERT_FILE")
        return TransferError(url, f"TLS failed ({text})", transient=True)
    if isinstance(error, (_exc.LocationParseError, ValueError)) and not isinstance(error, UnicodeError):
        return TransferError(url, f"malformed URL ({error})")
    if isinstance(error, OSError) and error.errno == errno.ECONNREFUSED:
        return TransferError(url, "connection refused", transient=True)
    return TransferError(url, f"the connection broke ({_cause(error)})", transient=True)


def _cause(error: BaseException) -> str:
    """The innermost reason urllib3 wraps, as one line."""
    seen = error
    for _ in range(5):
        inner = getattr(seen, "reason", None) or getattr(seen, "original_error", None) or seen.__cause__
        if isinstance(inner, BaseException):
            seen = inner
        elif seen.args and isinstance(seen.args[-1], BaseException) and seen.args[-1] is not seen:
            seen = seen.args[-1]
        else:
            break
    if isinstance(seen, socket.gaierror):
        return seen.strerror or str(seen)
    if isinstance(seen, http.client.IncompleteRead):
        return f"cut off, {seen.expected} bytes short" if seen.expected is not None else "cut off"
    text = str(seen).strip() or type(seen).__name__
    if isinstance(seen, _exc.HTTPError) and ": " in text and text.startswith(("<", "HTTPConnection", "HTTPSConnection")):
        text = text.split(": ", 1)[1]  # drop urllib3's "<connection object at 0x…>: " prefix
    return " ".join(text.split())


def _shown_proxy(proxy: str) -> str:
    parts = urllib.parse.urlsplit(proxy)
    return _without_credentials(parts).rstrip("/")


def _user_agent() -> str:
    from .. import __version__

    return f"cudapkgs/{__version__}"


# -- the process's client and one-call helpers --------------------------------------------------

_DEFAULT: Client | None = None
_DEFAULT_LOCK = threading.Lock()
_CLIENTS: weakref.WeakSet[Client] = weakref.WeakSet()  # every Client alive, for a forked child


def _after_fork_in_child() -> None:
    """A forked child makes its own connections: the parent's kept-alive ones are the parent's (two
    processes reading one socket would take each other's responses), in the default client and in every
    other `Client` alike, and a lock may be held by a parent's thread that is not in the child."""
    global _DEFAULT, _DEFAULT_LOCK
    _DEFAULT, _DEFAULT_LOCK = None, threading.Lock()
    for client in list(_CLIENTS):
        client._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def default_client() -> Client:
    """The process-wide `Client` (created on first use): share it, so connections are reused."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = Client()
        return _DEFAULT


def request(method: str, url: str, **options: Any) -> Response:
    """`default_client().request(method, url, **options)`."""
    return default_client().request(method, url, **options)


def get_bytes(url: str, *, limits: Limits, headers: Mapping[str, str] | None = None, attempts: int = 3,
              backoff_s: float = 1.0) -> bytes:
    """The body of a GET of `url` answered 200, at most `limits.max_bytes` bytes.

    The whole exchange (request and body) is retried on transient failures, a body cut short
    included, within one deadline. Raises `TransferError`: `StatusError` for another status
    (e.g. "HTTP 404 Not Found"), `TooLarge`, `DeadlineExceeded`.
    """
    deadline = time.monotonic() + limits.deadline_seconds()
    client = default_client()

    def once() -> bytes:
        with client.request("GET", url, limits=limits, headers=headers, deadline=deadline) as response:
            if response.status != 200:
                raise status_error(response)
            return response.read()

    return retry(once, attempts=attempts, backoff_s=backoff_s, deadline=deadline)
