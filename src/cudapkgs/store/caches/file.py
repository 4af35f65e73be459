"""`file:///dir`: a binary cache in a local directory (or a mounted share).

Objects are written to a temporary file in the cache directory and renamed
into place, so a reader sees an object whole or not at all.
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
from typing import BinaryIO

from .base import Cache, CacheError

__all__ = ["FileCache"]


class FileCache(Cache):
    """The cache in directory `root` (created on first upload)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        parsed = urllib.parse.urlsplit(url)
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise CacheError(f"{url}: a file cache URL is file:///absolute/dir")
        self.root = os.path.abspath(urllib.parse.unquote(parsed.path))
        self.local_dir = self.root

    def _path(self, name: str) -> str:
        if name.startswith("/") or ".." in name.split("/"):
            raise CacheError(f"{self.url}: refusing object name {name!r}")
        return os.path.join(self.root, name)

    def _get(self, name: str) -> BinaryIO | None:
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CacheError(f"{self.url}: cannot read {name}: {error.strerror or error}") from None
        return os.fdopen(fd, "rb", buffering=0)

    def _exists(self, name: str) -> bool:
        return os.path.isfile(self._path(name))

    def _ensure_dirs(self, name: str) -> str:
        target = self._path(name)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
        except OSError as error:
            raise CacheError(f"{self.url}: cannot create {os.path.dirname(target)}: {error.strerror or error}") from None
        return target

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        target = self._ensure_dirs(name)
        fd, temp = tempfile.mkstemp(prefix=".put-", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(temp, 0o644)
            os.replace(temp, target)
        except OSError as error:
            if os.path.exists(temp):
                os.unlink(temp)
            raise CacheError(f"{self.url}: cannot write {name}: {error.strerror or error}") from None

    def _put_file(self, name: str, local: str, content_type: str) -> None:
        target = self._ensure_dirs(name)
        try:
            os.chmod(local, 0o644)
            os.replace(local, target)  # `local` was made in the cache directory: same file system
        except OSError as error:
            raise CacheError(f"{self.url}: cannot write {name}: {error.strerror or error}") from None
