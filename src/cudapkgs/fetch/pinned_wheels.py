"""A Python wheel pinned by file name and sha256, kept in the wheel cache (never in the store).

The wheels of the ML stack (torch 0.55-0.9 GB, triton 0.25 GB) are unpacked by their builder
straight from ``$XDG_CACHE_HOME/cudapkgs/wheels`` (`cudapkgs.fetch.wheels.wheel_cache_directory`,
the cache NVIDIA's wheels use, which ``cudapkgs gc --caches`` and ``maxCacheSize`` manage), so
the store holds the installed files only.  A wheel missing there is downloaded by pip with
``--require-hashes`` (`cudapkgs.fetch.pypi`: pip's own index configuration, no host named
here), moved into the cache and recorded with its sha256 (``<wheel>.sha256``, as for NVIDIA's
wheels); a cached wheel whose record is another hash is fetched again.  The builder hashes the
wheel again while it unpacks it (`cudapkgs.fetch.wheel_install.install_wheel`), so a cache
entry changed since it was recorded is refused, not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ..atomic_files import write_atomically
from ..errors import FetchError

__all__ = ["PinnedWheel", "cached_pinned_wheel", "fetch_pinned_wheel", "parse_pin"]

_FILE = re.compile(r"(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)-(?P<python>[A-Za-z0-9_.]+)-"
                   r"(?P<abi>[A-Za-z0-9_.]+)-(?P<platform>[A-Za-z0-9_.]+)\.whl")
_SUFFIX = ".sha256"


class PinnedWheel:
    """A wheel file name and its sha256 (hex): ``name``, ``version`` and the tags come from the name."""

    __slots__ = ("file", "sha256", "name", "version", "python", "abi", "platform")

    def __init__(self, file: str, sha256: str) -> None:
        """Raise `FetchError` unless `file` is a wheel file name (PEP 427, no build tag) and
        `sha256` 64 hex digits."""
        match = _FILE.fullmatch(file or "")
        if match is None:
            raise FetchError(f"{file!r} is not a wheel file name (<name>-<version>-<python>-<abi>-<platform>.whl)")
        if not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
            raise FetchError(f"{file}: {sha256!r} is not a sha256 (64 hex digits)")
        self.file, self.sha256 = file, sha256.lower()
        self.name, self.version = match["name"], match["version"]
        self.python, self.abi, self.platform = match["python"], match["abi"], match["platform"]

    def __repr__(self) -> str:
        return f"PinnedWheel({self.file!r}, {self.sha256[:12]}…)"


def parse_pin(spec: object) -> PinnedWheel:
    """A `PinnedWheel` from a derivation's ``{"file": …, "sha256": …}``; FetchError if malformed."""
    if not isinstance(spec, dict) or not isinstance(spec.get("file"), str) or not isinstance(spec.get("sha256"), str):
        raise FetchError(f"a pinned wheel is {{file, sha256}}, got {spec!r}")
    return PinnedWheel(spec["file"], spec["sha256"])


def _cache(cache: Path | None) -> Path:
    from .wheels import wheel_cache_directory

    return Path(cache) if cache is not None else wheel_cache_directory()


def cached_pinned_wheel(pin: PinnedWheel, cache: Path | None = None) -> Path | None:
    """The cached wheel of `pin` when its record holds the pinned sha256 (its bytes are not read here)."""
    path = _cache(cache) / pin.file
    record = path.with_name(path.name + _SUFFIX)
    from .wheel_lookup import read_sha256_record

    try:
        if path.is_file() and not path.is_symlink() and read_sha256_record(record) == pin.sha256:
            return path
    except OSError:
        return None
    return None


def fetch_pinned_wheel(pin: PinnedWheel, *, cache: Path | None = None, pip: Sequence[str] | None = None,
                       timeout: float = 1800, progress: Callable[[int, int | None], None] | None = None) -> Path:
    """The wheel of `pin` in the wheel cache, downloaded by pip (``--require-hashes``) when missing.

    `progress(done, total)` hears of a download (not of a cache hit): the bytes pip has so far with
    total None (`pip_progress`), then the wheel's size twice once it is in.  Concurrent fetches of
    one wheel wait for each other (a lock file beside it).  Raises `FetchError` (`HashMismatchError`
    with both hashes when the index serves other bytes).
    """
    from ..store.locks import PathLock, acquire_saying_so
    from .pypi import _PipDownload

    directory = _cache(cache)
    directory.mkdir(parents=True, exist_ok=True)
    lock = acquire_saying_so(PathLock(directory / f".{pin.file}.lock"), f"the download of {pin.file}")
    try:
        found = cached_pinned_wheel(pin, directory)
        if found is not None:
            return found
        scratch = Path(tempfile.mkdtemp(prefix=".pinned-", dir=directory))
        try:
            download = _PipDownload(pin.name, pin.version, pin.sha256, pip=pip, timeout=timeout,
                                    wheel=(pin.python, pin.abi, pin.platform),
                                    on_bytes=(lambda n: progress(n, None)) if progress is not None else None)
            download.name = pin.file  # the exact file (pip normalises names the same way)
            got = download(scratch)
            target = directory / pin.file
            record = target.with_name(target.name + _SUFFIX)
            os.replace(got, target)
            write_atomically(record, pin.sha256 + "\n", sync=False)
            if progress is not None:
                size = target.stat().st_size
                progress(size, size)
            return target
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    finally:
        lock.release()
