"""`http://host/prefix` and `https://…`: a binary cache over HTTP (GET to read, PUT to upload).

Reading works with any static file server or `nix-serve`/`cudapkgs serve`;
uploading needs a server that accepts PUT (WebDAV, e.g. nginx's dav module,
which also creates the nar/ directory with `create_full_put_path`). A NAR is
PUT before its narinfo. Connection failures, timeouts and 5xx answers raise
CacheUnavailable (the caller stops asking that cache); 404 is a miss.
Credentials in the URL (https://user:pass@host/…) are sent as HTTP basic auth.
"""

from __future__ import annotations

import base64
import http.client
import os
import socket
import ssl
import urllib.parse
from typing import BinaryIO

from .base import Cache, CacheError, CacheUnavailable

__all__ = ["HttpCache"]

TIMEOUT = 30.0


class HttpCache(Cache):
    """A cache served at `url` (http or https)."""

    def __init__(self, url: str, timeout: float = TIMEOUT) -> None:
        super().__init__(url.rstrip("/"))
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CacheError(f"{url}: not an http(s):// cache URL")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.headers: dict[str, str] = {"User-Agent": "cudapkgs"}
        if parts.username:
            token = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
        # Shown in messages without credentials.
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, self.prefix, "", ""))

    def _connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _request(self, method: str, name: str, body=None, headers: dict[str, str] | None = None):
        conn = self._connection()
        try:
            conn.request(method, f"{self.prefix}/{name}", body=body, headers={**self.headers, **(headers or {})})
            response = conn.getresponse()
        except (OSError, socket.timeout, http.client.HTTPException, ssl.SSLError) as error:
            conn.close()
            raise CacheUnavailable(f"the cache {self.url} does not answer ({_reason(error)})") from None
        if response.status >= 500:
            response.read()
            conn.close()
            raise CacheUnavailable(f"the cache {self.url} answers {response.status} {response.reason} for {name}")
        return conn, response

    def _get(self, name: str) -> BinaryIO | None:
        conn, response = self._request("GET", name)
        if response.status == 404 or response.status == 410:
            response.read()
            conn.close()
            return None
        if response.status != 200:
            response.read()
            conn.close()
            raise CacheError(f"{self.url}/{name}: the server answers {response.status} {response.reason}")
        return _Body(conn, response)

    def _exists(self, name: str) -> bool:
        conn, response = self._request("HEAD", name)
        response.read()
        conn.close()
        return response.status == 200

    def _put(self, name: str, body, length: int, content_type: str) -> None:
        conn, response = self._request("PUT", name, body=body,
                                       headers={"Content-Type": content_type, "Content-Length": str(length)})
        response.read()
        conn.close()
        if response.status not in (200, 201, 204):
            raise CacheError(f"{self.url}/{name}: upload refused ({response.status} {response.reason}); "
                             "the server must accept PUT (e.g. WebDAV)")

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        self._put(name, data, len(data), content_type)

    def _put_file(self, name: str, local: str, content_type: str) -> None:
        with open(local, "rb") as f:  # http.client streams a file body in blocks
            self._put(name, f, os.fstat(f.fileno()).st_size, content_type)


class _Body:
    """A response body that closes its connection with it."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        self.conn, self.response = conn, response

    def read(self, n: int = -1) -> bytes:
        try:
            return self.response.read(n if n is not None and n >= 0 else None)
        except (OSError, http.client.HTTPException) as error:
            raise CacheUnavailable(f"the connection broke while reading ({_reason(error)})") from None

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.response.close()
        self.conn.close()


def _reason(error: BaseException) -> str:
    if isinstance(error, socket.timeout):
        return "timed out"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return "unknown host"
    return str(error) or type(error).__name__
