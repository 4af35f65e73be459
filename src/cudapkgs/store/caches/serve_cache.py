"""The NARs `cudapkgs serve` keeps on disk: compressed NARs, and whole NARs of paths with many small files.

Entries are named by what they hold, so one never goes stale: the NAR hash of the path
(and, for a compressed one, the sha256 of the compressed bytes, the narinfo's FileHash):

    <dir>/<nar hash>.nar                       an uncompressed NAR
    <dir>/<nar hash>.<file hash>.nar.zst       a zstd-compressed NAR

(both hashes in Nix base-32). An entry is written to a temporary file in the same directory,
checked (the NAR it holds hashes to the NAR hash in its name) and only then renamed into
place; a server never publishes what the store's record does not vouch for. The directory
is this user's (mode 0700); one that others can write is refused. Entries are evicted least
recently used first once their total exceeds `max_bytes`; an entry evicted while a response
reads it stays readable until that file is closed.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ...errors import StoreError, shell_word
from ..paths import BASE32_CHARS

__all__ = ["CachedNar", "NarCache", "check_cache_dir", "default_cache_dir"]

_NAME = re.compile(f"([{BASE32_CHARS}]{{52}})(?:\\.([{BASE32_CHARS}]{{52}}))?\\.nar(\\.zst)?")
_EXT = {"none": ".nar", "zstd": ".nar.zst"}


def default_cache_dir(store_dir: str) -> Path:
    """``$XDG_CACHE_HOME/cudapkgs/serve/<name of the store>``: one directory per served store."""
    import hashlib

    from ...xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    base = required_dir("XDG_CACHE_HOME")
    digest = hashlib.sha256(os.fsencode(store_dir)).hexdigest()[:16]
    return Path(base) / "cudapkgs" / "serve" / f"{os.path.basename(store_dir.rstrip('/')) or 'store'}-{digest}"


def check_cache_dir(directory: str | os.PathLike[str]) -> None:
    """Make `directory` (mode 0700, parents too) for served NARs, or check the one there: StoreError (one line)
    when it cannot be made or used, or is writable by others or not this user's. `cudapkgs serve` calls it
    before opening the store, so that a refused --cache-dir creates no store."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.stat(directory)
    except OSError as error:
        raise StoreError(f"cannot use {directory} for served NARs: {error.strerror or error}; "
                         "choose another with --cache-dir") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"cannot use {directory} for served NARs: not a directory; choose another with --cache-dir")
    if st.st_mode & 0o022 or st.st_uid != os.geteuid():
        raise StoreError(f"refusing {directory} for served NARs: it is writable by others or not yours "
                         f"(mode {stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid}); fix it with: chmod 700 "
                         f"{shell_word(directory)}, or choose another with --cache-dir")


@dataclass(frozen=True)
class CachedNar:
    """One entry: `file` on disk, its `size` in bytes and (compressed) its sha256 as ``sha256:<base-32>``."""

    file: Path
    size: int
    file_hash: str | None
    compression: str


class NarCache:
    """The entries under `directory`, at most `max_bytes` in all (see the module docstring).

    Raises StoreError if the directory cannot be made or others can write it. Thread-safe.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], CachedNar] = OrderedDict()  # (nar hash, compression)
        self._total = 0
        check_cache_dir(self.directory)
        self._load()

    def _load(self) -> None:
        found = []
        with os.scandir(self.directory) as it:
            for entry in it:
                if entry.name.startswith(".tmp-"):
                    try:  # left by a server that was killed while writing it
                        os.unlink(entry.path)
                    except OSError:
                        pass
                    continue
                match = _NAME.fullmatch(entry.name)
                if match is None or not entry.is_file(follow_symlinks=False):
                    continue
                compression = "zstd" if match[3] else "none"
                if (compression == "zstd") != (match[2] is not None):
                    continue
                st = entry.stat(follow_symlinks=False)
                file_hash = f"sha256:{match[2]}" if match[2] else None
                found.append((st.st_mtime, f"sha256:{match[1]}", CachedNar(Path(entry.path), st.st_size, file_hash, compression)))
        for _, nar_hash, cached in sorted(found, key=lambda t: t[0]):  # oldest first: evicted first
            self._entries[(nar_hash, cached.compression)] = cached
            self._total += cached.size
        self._evict()

    def get(self, nar_hash: str, compression: str) -> CachedNar | None:
        """The entry for `nar_hash` ("sha256:<base-32>") in `compression` ("none" or "zstd"), or None."""
        with self._lock:
            cached = self._entries.get((nar_hash, compression))
            if cached is not None:
                self._entries.move_to_end((nar_hash, compression))
            return cached

    def forget(self, nar_hash: str, compression: str) -> None:
        """Drop an entry whose file turned out to be gone (another server sharing the directory evicted it)."""
        with self._lock:
            cached = self._entries.pop((nar_hash, compression), None)
            if cached is not None:
                self._total -= cached.size

    def temporary(self) -> tuple[int, Path]:
        """A new temporary file in the directory: (open descriptor, path); `publish` or unlink it."""
        fd, name = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        return fd, Path(name)

    def publish(self, temp: Path, nar_hash: str, compression: str, file_hash: str | None = None) -> CachedNar:
        """Rename the finished, checked `temp` into place as the entry for `nar_hash`; returns it.

        `file_hash` ("sha256:<base-32>" of the file) is required for a compressed entry.
        """
        digest = nar_hash.split(":", 1)[1]
        if compression == "zstd":
            if file_hash is None:
                raise ValueError("a compressed entry needs its file hash")
            name = f"{digest}.{file_hash.split(':', 1)[1]}{_EXT[compression]}"
        else:
            name, file_hash = f"{digest}{_EXT[compression]}", None
        target = self.directory / name
        os.chmod(temp, 0o600)
        os.rename(temp, target)
        cached = CachedNar(target, os.stat(target).st_size, file_hash, compression)
        with self._lock:
            old = self._entries.pop((nar_hash, compression), None)
            if old is not None:
                self._total -= old.size
                if old.file != target:
                    _unlink(old.file)
            self._entries[(nar_hash, compression)] = cached
            self._total += cached.size
            self._evict()
        return cached

    def _evict(self) -> None:
        # The newest entry stays even when it alone is over the budget: it is about to be served.
        while self._total > self.max_bytes and len(self._entries) > 1:
            _, cached = self._entries.popitem(last=False)
            self._total -= cached.size
            _unlink(cached.file)

    @property
    def total_bytes(self) -> int:
        """Bytes the entries take."""
        return self._total


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
