"""`file:///dir`: a binary cache in a local directory (or a mounted share).

Objects are written to a temporary file in the cache directory and renamed
into place, so a reader sees an object whole or not at all.
"""

from __future__ import annotations

import errno
import os
import stat
import urllib.parse
from typing import BinaryIO

from ...errors import shown
from ...inputs import file_kind
from .base import Cache, CacheError, ObjectTooLarge

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

    def _get(self, name: str, max_bytes: int) -> BinaryIO | None:
        # Regular files only, opened without following a link and without blocking: a FIFO
        # named like a narinfo or NAR would hang the open (and then the read), a directory fail
        # in the middle of unpacking, a device never end (issue 23).
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise CacheError(f"{self.url}/{name}: is a symbolic link; a file cache serves regular files only") from None
            raise CacheError(f"{self.url}: cannot read {name}: {error.strerror or error}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise CacheError(f"{self.url}/{name}: is {file_kind(st.st_mode)}, not a regular file; refusing to read it")
        if st.st_size > max_bytes:
            os.close(fd)
            raise ObjectTooLarge(f"{self.url}/{name}: has {st.st_size} bytes, more than the {max_bytes} allowed "
                                 "for it; not substituted")
        return os.fdopen(fd, "rb", buffering=0)

    def _exists(self, name: str) -> bool:
        try:
            self._directories(name, create=False)
            return stat.S_ISREG(os.lstat(self._path(name)).st_mode)
        except (OSError, CacheError):
            return False

    def _directories(self, name: str, *, create: bool) -> None:
        """Check (and with `create`, make) each directory between the cache's root and object `name`
        (``nar/``, ``realisations/``): a real directory, never a symbolic link. Raises `CacheError`
        naming the link, `OSError` when one is missing and `create` is false.

        A cache directory may be a cloned repository's or a shared one: with ``nar -> ~/elsewhere``
        planted there, `cudapkgs copy --to file://DIR` wrote each NAR through the link, outside the
        cache (issue 30's attack). The root itself is the user's to name, a link included.
        """
        directory = self.root
        for part in os.path.dirname(name).split("/"):
            if not part:
                continue
            directory = os.path.join(directory, part)
            try:
                st = os.lstat(directory)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(directory)  # fails (EEXIST) on anything planted meanwhile
                st = os.lstat(directory)
            if not stat.S_ISDIR(st.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else file_kind(st.st_mode)
                raise CacheError(f"{self.url}: {shown(directory)} is {kind}, not a directory; a file "
                                 "cache writes only into its own directories: remove it, or use another cache directory")

    def _ensure_dirs(self, name: str) -> str:
        target = self._path(name)
        try:
            os.makedirs(self.root, exist_ok=True)
            self._directories(name, create=True)
        except OSError as error:
            raise CacheError(f"{self.url}: cannot create {shown(os.path.dirname(target))}: {error.strerror or error}") from None
        return target

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        target = self._ensure_dirs(name)
        import tempfile  # here: only uploads need it (random, shutil: a few ms of every start-up)

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

