"""Substituted paths whose files may not be on disk yet: noted before they are registered, checked after a reboot.

The durability contract of substitution (issue 24, goal 3). A substituted path's files are
written through the page cache and not fsynced one by one (Nix 2.8 does not either: its
``fsync-metadata`` covers the database only); waiting for the disk per file, or for a
``syncfs`` of everything dirty on the file system (other users' gigabytes too), made the
wall time depend on the machine's write-back. Instead, before a path is registered its store
path is appended to ``<store>/.meta/unsynced/<boot id>`` and that note is fdatasync'ed (a
tenth of a millisecond), so the note is on disk before the registration can be.

A process that dies loses nothing: the page cache outlives it. Only a kernel crash or a
power cut can lose written data, and either one ends the boot. So when a store is opened and
finds a note of another boot (``/proc/sys/kernel/random/boot_id`` differs), every path it
lists that is still valid is hashed again; one whose NAR hash or size no longer matches its
registration (a file cut short or zero-filled by the crash), or that cannot be read, is
discarded: forgotten with every path that refers to it, directly or not (their closures would
be broken), and its files removed. Then the note is removed. A path that fails verification
on restart is discarded: nothing half-written stays valid.

Where there is no boot id (not Linux), a reboot cannot be told apart: registration then waits
for ``os.sync()`` first (the data is durable before the path is valid).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from . import nar
from .files import _remove_tree
from .locks import PathLock

__all__ = ["boot_id", "note_unsynced", "check_earlier_boots"]

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot's id (a UUID, Linux), or None where the kernel gives none."""
    try:
        with open(_BOOT_ID) as f:
            text = f.read().strip()
    except OSError:
        return None
    return text if text and "/" not in text and not text.startswith(".") else None


_noted: dict[str, set[str]] = {}  # note file -> the paths this process wrote to it (each noted once)
_noted_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # A lock held by a parent's thread at fork() is never released in the child: a lock of its own.
    global _noted_lock
    _noted_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def note_unsynced(meta_dir: Path, paths: Iterable[str]) -> None:
    """Record durably that `paths` are about to be registered with files not yet synced (or sync them).

    Appends the paths this process has not noted yet to this boot's note in
    ``meta_dir/unsynced``, in one write, and fdatasyncs it (a substitution notes its whole
    closure once, before the first NAR; a path noted that never becomes valid is skipped by
    the check). Without a boot id, calls ``os.sync()`` instead. OSError when the note cannot be
    written (the caller then does not register the path).
    """
    boot = boot_id()
    if boot is None:
        os.sync()
        return
    directory = meta_dir / "unsynced"
    note = directory / boot
    with _noted_lock:
        done = _noted.setdefault(os.fspath(note), set())
        fresh = [p for p in dict.fromkeys(paths) if p not in done]
        if not fresh:
            return
        if not directory.is_dir():
            directory.mkdir(mode=0o755, exist_ok=True)
            _fsync_dir(meta_dir)
        created = not note.exists()
        fd = os.open(note, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, b"".join(os.fsencode(p) + b"\n" for p in fresh))  # one append: others' do not interleave
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(directory)
        done.update(fresh)


def check_earlier_boots(store, warn: Callable[[str], None] | None = None) -> list[str]:
    """Hash again the paths noted in earlier boots (see the module); discard those that fail; the paths discarded.

    Cheap when there is nothing to do (one ``listdir``). Each note is handled under its own
    lock, once, by whichever process opens the store first; paths no longer valid are skipped.
    """
    directory = store.root / ".meta" / "unsynced"
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    current = boot_id()
    discarded: list[str] = []
    for name in sorted(names):
        if name.endswith(".lock") or name == current or current is None:
            continue
        lock = PathLock(directory / (name + ".lock"))
        lock.acquire()
        try:
            note = directory / name
            if not note.exists():
                continue  # another process checked it
            listed = dict.fromkeys(line for line in note.read_text(errors="replace").splitlines() if line)
            bad = [p for p in listed if store.db.is_valid(p) and not _intact(store, p)]
            if bad:
                doomed = _with_referrers(store, bad)
                store.db.invalidate(doomed)  # forget first: a crash now leaves only unregistered files
                for path in doomed:
                    if os.path.lexists(path):
                        _remove_tree(path)
                discarded += doomed
                if warn is not None:
                    warn(f"warning: {len(bad)} path(s) substituted before the last crash or power loss were damaged "
                         f"({', '.join(bad[:3])}{' …' if len(bad) > 3 else ''}); discarded {len(doomed)} path(s) "
                         "with what refers to them; substitute them again")
            note.unlink()
            with _noted_lock:
                _noted.pop(os.fspath(note), None)
        finally:
            lock.release_and_delete()
    return discarded


def _intact(store, path: str) -> bool:
    info = store.db.query(path)
    if info is None:
        return True
    try:
        digest, size = nar.nar_hash(path)
    except (OSError, ValueError):
        return False
    return (nar.format_hash(digest), size) == (info.nar_hash, info.nar_size)


def _with_referrers(store, paths: list[str]) -> list[str]:
    seen = dict.fromkeys(paths)
    stack = list(paths)
    while stack:
        for referrer in store.db.referrers(stack.pop()):
            if referrer not in seen:
                seen[referrer] = None
                stack.append(referrer)
    return list(seen)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
