"""`http://host/prefix` and `https://…`: a binary cache over HTTP (GET to read, PUT to upload, HEAD to ask).

Reading works with any static file server or `nix-serve`/`cudapkgs serve`;
uploading needs a server that accepts PUT (WebDAV, e.g. nginx's dav module,
which also creates the nar/ directory with `create_full_put_path`). A NAR is
PUT before its narinfo. Transfers go through the one HTTP client
(`cudapkgs.transport.http`: kept-alive connections shared by the whole closure,
the environment's proxy and CA rules, retries with backoff); every object is
read within a byte bound the caller gives (a narinfo's 1 MiB, a NAR's bound from
its signed NarSize) and a deadline. Connection failures, timeouts, deadlines and
5xx answers raise CacheUnavailable (the caller stops asking that cache); 404 is
a miss. Credentials in the URL (https://user:pass@host/…) are sent as HTTP basic auth.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import BinaryIO

from ...errors import shown_cache_url
from .base import Cache, CacheError, CacheUnavailable, ObjectTooLarge, url_settings

__all__ = ["HttpCache"]

TIMEOUT = 30.0


class HttpCache(Cache):
    """A cache served at `url` (http or https).

    `timeout` bounds connecting and any one silence (seconds); `attempts` and `backoff_s` are the
    retries of a request that failed transiently; `deadline_base_s` and `low_speed_bps` tune the
    per-object deadline and stall rule (`cudapkgs.transport.http.Limits`).
    """

    def __init__(self, url: str, timeout: float = TIMEOUT, *, attempts: int = 2, backoff_s: float = 0.5,
                 deadline_base_s: float = 60.0, low_speed_bps: int = 1024) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CacheError(f"{shown_cache_url(url)}: not an http(s):// cache URL")
        try:
            parts.port
        except ValueError:
            raise CacheError(f"{shown_cache_url(url)}: the port is not a number from 0 to 65535") from None
        super().__init__(url.rstrip("/"), url_settings(self._shown(parts), parts.query))
        self.timeout = timeout
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.deadline_base_s = deadline_base_s
        self.low_speed_bps = low_speed_bps
        # With its credentials (the client sends them as basic auth), without its settings (the query)
        self._base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.url = self._shown(parts)

    @staticmethod
    def _shown(parts: urllib.parse.SplitResult) -> str:
        """The URL as messages show it: without credentials, settings or a final slash."""
        netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))

    def _limits(self, max_bytes: int, upload: int = 0):
        from ...transport.http import Limits, deadline_for

        return Limits(max_bytes=max_bytes, connect_s=self.timeout, read_s=self.timeout,
                      deadline_s=deadline_for(max_bytes + upload, base_s=self.deadline_base_s),
                      low_speed_bps=self.low_speed_bps, low_speed_s=self.timeout)

    def _request(self, method: str, name: str, *, max_bytes: int, body=None, length: int = 0,
                 headers: dict[str, str] | None = None):
        from ...transport.errors import TooLarge, TransferError
        from ...transport.http import request

        try:
            response = request(method, f"{self._base}/{name}", limits=self._limits(max_bytes, length), body=body,
                               headers=headers, attempts=self.attempts, backoff_s=self.backoff_s)
        except TooLarge as error:
            raise ObjectTooLarge(f"{self.url}/{name}: {error.reason}; not substituted") from None
        except TransferError as error:
            if error.status is not None:
                raise CacheUnavailable(f"the cache {self.url} answers {error.reason.removeprefix('HTTP ')} for {name}"
                                       f"{error.tries}") from None
            raise CacheUnavailable(f"the cache {self.url} does not answer ({error.reason}){error.tries}") from None
        if response.status >= 500:
            response.discard()
            raise CacheUnavailable(f"the cache {self.url} answers {response.status} {response.reason} for {name}")
        return response

    def _get(self, name: str, max_bytes: int) -> BinaryIO | None:
        response = self._request("GET", name, max_bytes=max_bytes)
        if response.status in (404, 410):
            response.discard()
            return None
        if response.status != 200:
            response.discard()
            raise CacheError(f"{self.url}/{name}: the server answers {response.status} {response.reason}")
        return _Body(response, f"{self.url}/{name}")  # type: ignore[return-value]

    def _exists(self, name: str) -> bool:
        response = self._request("HEAD", name, max_bytes=0)
        response.close()
        return response.status == 200

    def _put(self, name: str, body, length: int, content_type: str) -> None:
        response = self._request("PUT", name, max_bytes=1 << 20, body=body, length=length,
                                 headers={"Content-Type": content_type, "Content-Length": str(length)})
        response.discard()
        if response.status not in (200, 201, 204):
            raise CacheError(f"{self.url}/{name}: upload refused ({response.status} {response.reason}); "
                             "the server must accept PUT (e.g. WebDAV)")

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        self._put(name, data, len(data), content_type)

    def _put_file(self, name: str, local: str, content_type: str) -> None:
        with open(local, "rb") as f:  # streamed in blocks; rewound for a retry
            self._put(name, f, os.fstat(f.fileno()).st_size, content_type)


class _Body:
    """A response body as a binary stream; a transfer failure is a CacheUnavailable or SubstituteRefused naming it."""

    def __init__(self, response, where: str) -> None:
        self.response = response
        self.where = where

    def read(self, n: int = -1) -> bytes:
        """`n` bytes (fewer at the end), everything for -1: a NAR's bulk reads."""
        return self._call(self.response.read, n)

    def read1(self, n: int = -1) -> bytes:
        """Up to `n` bytes from one receive, each checked against the low-speed rule: a narinfo's reads."""
        return self._call(self.response.read1, n)

    def readinto(self, buffer) -> int:
        """`buffer` filled from the socket (fewer bytes only at the end; 0 there): a NAR's bulk reads, no copy."""
        return self._call(self.response.readinto, buffer)

    def _call(self, read, n):
        from ...transport.errors import TooLarge, TransferError

        try:
            return read(n)
        except TooLarge as error:
            raise ObjectTooLarge(f"{self.where}: {error.reason}; not substituted") from None
        except TransferError as error:
            raise CacheUnavailable(f"the cache does not answer for {self.where} ({error.reason})") from None

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.response.close()
