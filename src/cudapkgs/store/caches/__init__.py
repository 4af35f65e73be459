"""Binary caches in Nix's layout: narinfo, signatures, and one backend per module.

`open_cache(url)` picks the backend by scheme: file:// (`file.py`),
http:// and https:// (`http.py`), s3:// (`s3.py`). `substitution.py` plans and
runs substitution of closures from several caches; `serve.py` serves a store.
"""

from __future__ import annotations

__all__ = ["open_cache"]


def open_cache(url: str):
    """The `Cache` for `url`; CacheError naming it for an unknown scheme or a malformed URL."""
    from .base import CacheError

    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "file":
        from .file import FileCache

        return FileCache(url)
    if scheme in ("http", "https"):
        from .http import HttpCache

        return HttpCache(url)
    if scheme == "s3":
        from .s3 import S3Cache

        return S3Cache(url)
    if url.startswith("/"):
        from .file import FileCache

        return FileCache("file://" + url)
    from ...errors import shown_cache_url

    raise CacheError(f"{shown_cache_url(url)!r} is not a cache URL: use file:///dir, http(s)://host/prefix or s3://bucket?endpoint=…&region=…")


def cache_identity(url: str) -> tuple[str, ...]:
    """What makes two substituter URLs the same cache, as a tuple to compare: a ``file://`` cache
    (or a bare absolute path) by its directory's real path; ``http(s)://`` by host (lower case,
    without a final dot) and path (percent-decoded, repeated and final slashes dropped), whatever
    the scheme, port and credentials, as one server may answer on both schemes and several ports;
    ``s3://`` by bucket and prefix; anything else by its text. Reads nothing but the file
    system's links. Names the user's cache also answers to (another host name, an address) are
    not recognised: they would need the network.

    Used to keep a project's keys off the user's own caches however the project spells them
    (`project.evaluate_project`); treating two URLs as one only ever takes trust away.
    """
    import os
    import re
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return ("text", url)
    scheme = parts.scheme.lower()
    if scheme == "file" or (not scheme and url.startswith("/")):
        path = urllib.parse.unquote(parts.path) if scheme else url
        return ("file", os.path.realpath(path))
    if scheme in ("http", "https"):
        path = re.sub("/+", "/", urllib.parse.unquote(parts.path)).rstrip("/")
        return ("http", (parts.hostname or "").rstrip("."), path)
    if scheme == "s3":
        return ("s3", parts.netloc.lower(), urllib.parse.unquote(parts.path).strip("/"))
    return ("text", url)
