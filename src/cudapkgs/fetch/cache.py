"""The download caches: what they hold, what a build is using, and collecting them.

Two caches hold fetched sources (never unpacked trees: builds unpack straight into
their build directory):

``downloads``  ``<store>/.cache/downloads/<sha256>/<archive>``: verified redist archives,
               one directory per archive sha256 (``.lock`` serialises the download).
``wheels``     ``$XDG_CACHE_HOME/cudapkgs/wheels/<wheel>`` and ``<wheel>.sha256``: NVIDIA's
               PyPI wheels, checked by pip against the index.

A build marks what it reads as in use with a shared ``flock`` (`in_use`); collection
takes the exclusive lock without waiting and skips what it cannot lock, so it never
deletes a file a running build uses.  Using an entry touches its modification time,
which orders least-recently-used eviction under a size budget (``maxCacheSize``).
Anything else found in a cache directory (for instance the unpacked ``*-wheel``
trees older cudapkgs versions kept beside the archives) is collectable too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import FetchError
from ..store.locks import HeldDescriptor, PathLock

__all__ = [
    "CacheEntry",
    "CollectResult",
    "cache_roots",
    "collect",
    "download_entry",
    "drop_if_empty",
    "entries",
    "in_use",
    "use_download_entry",
]

#: The lock files of a ``downloads`` entry: ``.lock`` (one download at a time) and ``.inuse``
#: (builds reading it hold it shared; collection takes it exclusively).
LOCK_FILES = (".lock", ".inuse")



@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One collectable item: ``path`` (a file or directory), its size in bytes, last use (epoch s)."""

    cache: str
    path: Path
    size: int
    last_used: float
    lock_file: Path | None


@dataclass
class CollectResult:
    """What `collect` did: entries deleted (or that would be), bytes freed, entries left in use."""

    deleted: list[CacheEntry]
    freed: int
    in_use: list[CacheEntry]
    kept: int
    total_before: int
    dry_run: bool


def _wheel_cache() -> Path:
    # `wheel_lookup.wheel_cache_directory`, without importing the wheel modules.
    from ..xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    root = Path(required_dir("XDG_CACHE_HOME"))
    return root / "cudapkgs" / "wheels"


def cache_roots(store_dir: str | os.PathLike[str] | None) -> list[tuple[str, Path]]:
    """``(name, directory)`` of every download cache: the store's, the wheels', old manifests'."""
    from ..manifests import cache_directory

    roots = []
    if store_dir is not None:
        roots.append(("downloads", Path(store_dir) / ".cache" / "downloads"))
    roots.append(("wheels", _wheel_cache()))
    roots.append(("manifests (old download cache)", cache_directory()))
    return roots


def _tree_size(path: Path) -> int:
    try:
        if path.is_symlink() or not path.is_dir():
            return path.lstat().st_size
    except OSError:
        return 0
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _last_used(path: Path) -> float:
    try:
        if path.is_dir() and not path.is_symlink():
            # The files' times, not the directory's (creating .lock or .inuse changes that).
            times = [c.lstat().st_mtime for c in path.iterdir() if c.name not in (".lock", ".inuse")]
            return max(times) if times else path.lstat().st_mtime
        return path.lstat().st_mtime
    except OSError:
        return 0.0


# What the wheel cache keeps beside a wheel, deleted with it: the sha256 pip checked
# (`wheel_lookup`, `pinned_wheels`) and the record of its RECORD check (`record_checked`).
_WHEEL_RECORDS = (".sha256", ".checked")


def entries(store_dir: str | os.PathLike[str] | None) -> list[CacheEntry]:
    """Every entry of every cache (`cache_roots`), oldest use first.

    A cache directory another user could change (`cudapkgs.owners.problem`: theirs, writable by
    others, below a directory of theirs, reached through a link of theirs) has no entries: what it
    lists is theirs to choose, and `collect` deletes entries. Before, ``…/cudapkgs/wheels`` as a link of
    another user's to your home directory made `gc --caches` delete everything there."""
    from ..owners import problem

    found: list[CacheEntry] = []
    for name, root in cache_roots(store_dir):
        if problem(os.path.abspath(root)) is not None:
            continue
        try:
            children = sorted(root.iterdir())
        except OSError:
            continue
        for child in children:
            if name == "wheels" and child.name.endswith(_WHEEL_RECORDS):
                continue  # goes with its wheel
            if name == "wheels" and child.suffix == ".whl":
                records = [child.with_name(child.name + suffix) for suffix in _WHEEL_RECORDS]
                size = _tree_size(child) + sum(_tree_size(r) for r in records if r.exists())
                found.append(CacheEntry(name, child, size, _last_used(child), child))
            elif name == "downloads" and child.is_dir() and not child.is_symlink():
                found.append(CacheEntry(name, child, _tree_size(child), _last_used(child), child / ".inuse"))
            else:
                found.append(CacheEntry(name, child, _tree_size(child), _last_used(child), None))
    found.sort(key=lambda e: e.last_used)
    return found


def _try_exclusive(lock_file: Path | None) -> HeldDescriptor | int | None:
    """A `HeldDescriptor` holding the exclusive lock on ``lock_file`` (a forked child drops its copy);
    None when someone else holds it.

    -1 when there is nothing to lock (no such file).
    """
    if lock_file is None:
        return -1
    try:
        # O_NONBLOCK: a FIFO put at the name must not hang `gc --caches` (flock works on any descriptor).
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return HeldDescriptor(fd)


def _delete(entry: CacheEntry) -> None:
    path = entry.path
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    if entry.cache == "wheels":
        for suffix in _WHEEL_RECORDS:
            try:
                path.with_name(path.name + suffix).unlink()
            except FileNotFoundError:
                pass


def collect(
    store_dir: str | os.PathLike[str] | None,
    *,
    max_size: int | None = None,
    dry_run: bool = False,
    caches: Sequence[str] | None = None,
) -> CollectResult:
    """Delete cache entries: all of them (``max_size`` None), else least recently used ones
    until the caches together hold at most ``max_size`` bytes.

    Entries a build holds (`in_use`) are skipped and reported.  ``caches`` limits the
    caches considered by name (`cache_roots`).
    """
    everything = [e for e in entries(store_dir) if caches is None or e.cache in caches]
    total = sum(e.size for e in everything)
    deleted: list[CacheEntry] = []
    busy: list[CacheEntry] = []
    remaining = total
    for entry in everything:  # oldest first
        if max_size is not None and remaining <= max_size:
            break
        fd = _try_exclusive(entry.lock_file)
        if fd is None:
            busy.append(entry)
            continue
        try:
            if not dry_run:
                _delete(entry)
        finally:
            if isinstance(fd, HeldDescriptor):
                fd.close()
        deleted.append(entry)
        remaining -= entry.size
    return CollectResult(deleted, total - remaining, busy, remaining, total, dry_run)


@contextmanager
def in_use(path: str | os.PathLike[str]) -> Iterator[bool]:
    """Hold a shared lock marking a cache entry used while the block runs, and touch it when the block ends.

    ``path`` is a wheel, or an archive inside a ``downloads`` entry (whose ``.inuse`` file
    is locked).  Yields False when the entry disappeared meanwhile (collected): the caller
    fetches again.

    The touch (atime and mtime now: least recently used entries are collected first, `collect`)
    comes after the block, not before it: a touch changes the file's ctime, and an unpack that
    skips the member digests of a wheel checked before waits until the wheel's last change is
    older than a tick of the file system's clock (`record_checked.settled_identity`, 25 ms).
    Touched as a build took it, every wheel of a build waited those 25 ms before its first member
    (the five CUDA 13.0 wheels: all four first unpacks at once, with nothing else to run).
    While the block runs the shared lock keeps `collect` away, so the entry's age matters only after.
    """
    path = Path(path)
    lock_file = path if path.suffix == ".whl" else path.parent / ".inuse"
    # Never blocking on a FIFO put at the name (the wheel itself is then refused when it is read:
    # `inputs.open_cached`), and `.inuse` made here, never through a link planted at its name.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if lock_file.name == ".inuse":
        flags |= os.O_CREAT | os.O_NOFOLLOW
    try:
        fd = os.open(lock_file, flags, 0o644)
    except FileNotFoundError:
        yield False
        return
    except OSError as error:
        raise FetchError(f"{lock_file}: cannot use this cache entry ({error.strerror or error}); remove it") from None
    held = HeldDescriptor(fd)  # a forked child drops its copy: the lock is the parent's block's
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        alive = os.fstat(fd).st_nlink > 0 and path.exists()
        try:
            yield alive
        finally:
            if alive:  # used, whether the block succeeded or not; the lock is still held
                now = time.time()
                try:
                    os.utime(path, (now, now))
                except OSError:  # removed by the block (a damaged entry discarded), or not ours to touch
                    pass
    finally:
        held.close()


def use_download_entry(entry: Path) -> PathLock:
    """Create the ``downloads`` entry directory ``entry`` and hold its ``.inuse`` lock shared
    (the caller releases it), so that neither `collect` nor `drop_if_empty` deletes it meanwhile.

    Tries again when one of them removed the directory between its creation and the lock.
    Raises OSError when the directory cannot be made.
    """
    while True:
        entry.mkdir(parents=True, exist_ok=True)
        lock = PathLock(entry / ".inuse", shared=True)
        try:
            lock.acquire()
        except FileNotFoundError:  # removed meanwhile: make it again
            continue
        return lock


def drop_if_empty(entry: Path) -> bool:
    """Delete the ``downloads`` entry ``entry`` when it holds no download, only its lock files
    (and empty ``.part`` files): what a failed fetch leaves, or a fetch that the wheel cache
    served.  An entry another process uses or downloads into (its ``.inuse`` or ``.lock``
    held) is left alone, as is a non-empty ``.part`` (the next fetch resumes it).

    Returns True when the entry was deleted.  Never raises for a cache it cannot clean.
    """
    in_use_lock = PathLock(entry / ".inuse")
    download_lock = PathLock(entry / ".lock")
    try:
        if not in_use_lock.acquire(blocking=False):
            return False
        if not download_lock.acquire(blocking=False):
            return False
        leftovers = [name for name in os.listdir(entry) if name not in LOCK_FILES]
        if any(not (name.endswith(".part") and (entry / name).lstat().st_size == 0) for name in leftovers):
            return False
        for name in leftovers:
            (entry / name).unlink()
        download_lock.release_and_delete()
        in_use_lock.release_and_delete()
        entry.rmdir()  # fails (and keeps it) when another process made a lock file meanwhile
        return True
    except OSError:
        return False
    finally:
        download_lock.release()
        in_use_lock.release()


@contextmanager
def download_entry(entry: Path) -> Iterator[Path]:
    """Hold the ``downloads`` entry ``entry`` in use (`use_download_entry`) while the block
    fetches into it and reads it; afterwards delete it if it holds no download
    (`drop_if_empty`): a failed fetch, or one the wheel cache served, leaves nothing."""
    lock = use_download_entry(entry)
    try:
        yield entry
    finally:
        lock.release()
        drop_if_empty(entry)
