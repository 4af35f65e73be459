"""The store's scratch directories: ``<store>/.tmp/``, each held by a lock while in use (part of `Store`).

A build directory lives as long as its lock; a killed process's directories are removed by
the next build or gc (`WorkDirs._clean_tmp`).  `spread_subdirectories` places ``.tmp``'s new
directories well on ext4.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .files import _remove_tree
from .locks import PathLock

__all__ = ["WorkDirs", "spread_subdirectories"]


class WorkDirs:
    """Private, locked directories under ``<store>/.tmp`` (a part of `cudapkgs.store.store.Store`)."""

    tmp_dir: Path  # set by Store.__init__

    @contextmanager
    def work_dir(self, label: str = "build") -> Iterator[Path]:
        """A new private directory ``<store>/.tmp/work-<label>-<uuid>`` for a build's scratch files.

        It is locked while the block runs and removed afterwards; if the process is
        killed, the lock dies with it and the next build or gc removes the directory
        (`_clean_tmp`).  A caller that wants to keep it moves it away inside the block.
        """
        safe = "".join(c if c.isalnum() or c in "+-._" else "_" for c in label)[:100]
        with self._locked_tmp(f"work-{safe}-{os.urandom(16).hex()}") as path:
            yield path

    @contextmanager
    def _tmp_build(self) -> Iterator[Path]:
        """A private directory ``<store>/.tmp/<uuid>`` where outputs are built before they are registered."""
        with self._locked_tmp(os.urandom(16).hex()) as path:
            yield path

    @contextmanager
    def _locked_tmp(self, name: str) -> Iterator[Path]:
        """``<store>/.tmp/NAME``, mode 0700, held by ``NAME.lock`` while the block runs, then removed
        (the lock file too, even when the removal fails); `_clean_tmp` removes what a killed process left."""
        lock = PathLock(self.tmp_dir / (name + ".lock"))
        lock.acquire()
        path = self.tmp_dir / name
        try:
            path.mkdir(mode=0o700)
            yield path
        finally:
            try:
                if os.path.lexists(path):
                    _remove_tree(path)
            finally:
                lock.release_and_delete()

    def _clean_tmp(self) -> None:
        """Remove build directories whose owner died (their lock is free)."""
        try:
            entries = os.listdir(self.tmp_dir)
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.endswith(".lock"):
                # The lock of a directory already gone (its owner died after removing it): drop it too.
                if not os.path.lexists(self.tmp_dir / entry[: -len(".lock")]):
                    orphan = PathLock(self.tmp_dir / entry)
                    if orphan.acquire(blocking=False):
                        if os.path.lexists(self.tmp_dir / entry[: -len(".lock")]):
                            orphan.release()  # its owner has just made the directory
                        else:
                            orphan.release_and_delete()
                continue
            lock = PathLock(self.tmp_dir / (entry + ".lock"))
            if lock.acquire(blocking=False):
                try:
                    _remove_tree(self.tmp_dir / entry)
                finally:
                    lock.release_and_delete()


_FS_IOC_GETFLAGS = 0x80086601  # _IOR('f', 1, long): linux/fs.h
_FS_IOC_SETFLAGS = 0x40086602  # _IOW('f', 2, long)
_FS_TOPDIR_FL = 0x00020000  # chattr +T


def spread_subdirectories(directory: Path) -> bool:
    """Mark `directory` as the top of a hierarchy for ext4's Orlov allocator (``chattr +T``); True if it is.

    Builds unpack thousands of files into new directories under ``<store>/.tmp``. On ext4
    without a journal, allocating an inode skips, one block lookup each, every inode of the
    group freed in the last minutes (fs/ext4/ialloc.c, ``find_inode_bit`` and
    ``recently_deleted``, checked only when there is no journal): right after a gc or the
    removal of an earlier build, every file created in the same block group pays for every
    file deleted there. Measured here: half the build's CPU time (`docs/bench-wheels.md`).
    With the flag, ext4 places each new build directory in a block group of its own choice
    (few directories, many free inodes: Documentation/filesystems/ext4, "Orlov"), as it does
    for directories at the file system's root. Placement only: nothing else changes. Best
    effort: other file systems and other owners' directories are left alone (False).
    """
    import fcntl
    import struct

    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        if not flags & _FS_TOPDIR_FL:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_TOPDIR_FL))
        return True
    except OSError:  # ENOTTY, EOPNOTSUPP (not ext2/3/4), EPERM (not ours)
        return False
    finally:
        os.close(fd)
