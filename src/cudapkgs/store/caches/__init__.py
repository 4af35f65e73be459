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
    raise CacheError(f"{url!r} is not a cache URL: use file:///dir, http(s)://host/prefix or s3://bucket?endpoint=…&region=…")
