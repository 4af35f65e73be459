"""`file:///dir`: a binary cache in a local directory (or a mounted share).

Objects are written to a temporary file in the cache directory (`upload_temps`: locked while
its writer lives, removed by a later upload once it is gone), synced, and renamed into place,
the directory synced after: a reader sees an object whole or not at all, and after a crash a
narinfo (written last) never names a NAR that is not there.
"""

from __future__ import annotations

import errno
import os
import stat
import urllib.parse
from typing import BinaryIO

from ...errors import shown, shown_cache_url
from ...inputs import file_kind
from .base import Cache, CacheError, ObjectTooLarge, url_settings

__all__ = ["FileCache"]


class FileCache(Cache):
    """The cache in directory `root` (created on first upload)."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise CacheError(f"{shown_cache_url(url)}: a file cache URL is file:///absolute/dir[?compression-level=N]")
        # Shown without its settings (as http's and s3's are shown without credentials)
        super().__init__(urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path, "", "")),
                         url_settings(shown_cache_url(url), parsed.query))
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

    def init(self, store_dir: str) -> None:
        """Remove what uploads killed mid-way left (`upload_temps.remove_stale`: never a live upload's),
        then as `Cache.init`."""
        from .upload_temps import remove_stale

        remove_stale(self.root)
        super().init(store_dir)

    def _upload_temp(self):  # type: ignore[no-untyped-def]
        """A locked temporary in ``<cache>/.cudapkgs-uploads`` (`upload_temps`): on this file system, so
        `_put_file` renames it into place; never named like cache content."""
        from .upload_temps import create

        try:
            os.makedirs(self.root, exist_ok=True)
            return create(self.root)
        except OSError as error:
            raise CacheError(f"{self.url}: cannot create a temporary file: {error.strerror or error}"
                             f"{f' ({shown(error.filename)})' if error.filename else ''}") from None

    def _put_bytes(self, name: str, data: bytes, content_type: str) -> None:
        target = self._ensure_dirs(name)
        temp = self._upload_temp()
        try:
            with os.fdopen(temp.fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fchmod(f.fileno(), 0o644)  # through the descriptor: never a file a link put at the name
                os.fsync(f.fileno())
            self._move_into_place(temp.path, target)
        except OSError as error:
            raise CacheError(f"{self.url}: cannot write {name}: {error.strerror or error}") from None
        finally:
            temp.close()

    def _put_file(self, name: str, local: str, content_type: str) -> None:
        target = self._ensure_dirs(name)
        try:
            # `upload` wrote and closed it. Not following a link, not waiting on a FIFO put at its name (the
            # directory may be a group's: `upload_temps`); its mode set through this descriptor, never by name.
            fd = os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(errno.EINVAL, "not a regular file", local)
                os.fchmod(fd, 0o644)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._move_into_place(local, target)  # `local` was made in the cache directory: same file system
        except OSError as error:
            raise CacheError(f"{self.url}: cannot write {name}: {error.strerror or error}") from None

    @staticmethod
    def _move_into_place(temp: str, target: str) -> None:
        """Rename the written and synced `temp` (made 0644 through its descriptor) to `target`, then sync the
        directory holding `target`: after a crash the name is there with all its bytes, or not there.
        `upload` moves a NAR in before it writes its narinfo, so no narinfo survives a crash that its NAR
        does not. No chmod by name here: it followed a link put at `temp`'s name (the temporaries'
        directory may be a group's), making any file of the uploader's the link named world-readable."""
        os.replace(temp, target)
        _fsync_directory(os.path.dirname(target))


def _fsync_directory(directory: str) -> None:
    """fsync a directory (its new entries are on disk after it). File systems that cannot (EINVAL:
    some network or FUSE ones) are left as they are."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
