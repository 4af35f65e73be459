"""The temporary files of uploads into a file:// cache: made where a later upload can find them,
locked while their writer lives, and removed by the next upload once their writer is gone.

An upload writes its compressed NAR (or a narinfo) to a temporary file and renames it into place.
Before, the temporaries were ``.upload-*.nar`` and ``.put-*`` in the cache's root: a SIGKILL
mid-upload left them there for good, named like cache content. Now they live in
``<cache>/.cudapkgs-uploads/`` as ``<pid>-<random>.part``, and each writer holds an exclusive
`flock` on its file from its creation until it is renamed away or removed. The kernel drops the
lock when the writer dies, however it dies; `remove_stale` (run when an upload begins) removes
only files whose lock it can take and that are older than `STALE_AFTER` seconds, so another
process's live upload is never touched (its lock is held), and a file between its creation and
its lock is not either (too young). Files an older cudapkgs left in the root (no lock to ask) go
when they have not been written for `OLD_STALE_AFTER` seconds: a live writer writes all the time.

The cache directory may be a shared or cloned one: the temporary directory must be a real
directory (not a link), entries are opened without following links, relative to the directory's
descriptor, and only regular files are removed; at most `MAX_ENTRIES` are looked at per upload.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time

__all__ = ["TEMP_DIR", "LockedTemp", "create", "remove_stale"]

#: The directory of the temporaries, in the cache's root.
TEMP_DIR = ".cudapkgs-uploads"
#: A temporary whose lock is free is removed only when it is at least this old (seconds).
STALE_AFTER = 60.0
#: The unlocked ``.upload-*.nar`` / ``.put-*`` files of older versions: removed after this long unwritten.
OLD_STALE_AFTER = 3600.0
#: Entries looked at per call (a directory filled by someone else cannot hold an upload up for long).
MAX_ENTRIES = 10_000

_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class LockedTemp:
    """A new temporary file in ``<root>/.cudapkgs-uploads``: `fd` (open for writing; the caller may
    close it) and `path`. The lock is held on a second descriptor until `close`, which also
    removes the file if it is still there (not renamed into place)."""

    def __init__(self, root: str) -> None:
        import tempfile

        directory = _temp_dir(root, create=True)
        self.fd, self.path = tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=".part", dir=directory)
        try:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new and unique: nobody else has it
            except OSError as error:
                # A share without locks (an old NFS: ENOLCK): unlocked, and then never removed by
                # `remove_stale` either, whose flock fails the same way: a live upload stays safe.
                if error.errno not in _NO_LOCKS:
                    raise
            self._lock_fd = os.dup(self.fd)  # same open file: the lock lives while either is open
        except OSError:
            os.close(self.fd)
            os.unlink(self.path)
            raise

    def close(self) -> None:
        """Remove the file if it was not moved away, and drop the lock (idempotent)."""
        if self._lock_fd < 0:
            return
        try:
            st = os.fstat(self._lock_fd)
            with contextlib.suppress(FileNotFoundError):
                here = os.lstat(self.path)
                if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(self.path)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = -1


def create(root: str) -> LockedTemp:
    """A `LockedTemp` in the cache directory `root`. Raises OSError (a link or file planted where
    the temporary directory goes: ENOTDIR)."""
    return LockedTemp(root)


def _temp_dir(root: str, *, create: bool) -> str | None:
    """``<root>/.cudapkgs-uploads``, made when `create`; None when it is absent and not `create`.
    Raises OSError(ENOTDIR) when something other than a real directory is there."""
    directory = os.path.join(root, TEMP_DIR)
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        if not create:
            return None
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        else:
            _share_like(root, directory)
        st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "not a directory (a link or file is where the upload temporaries go)", directory)
    return directory


def _share_like(root: str, directory: str) -> None:
    """Give the new `directory` the permission bits of the cache directory `root`, plus the sticky bit.

    Whoever may write objects into the cache may upload, so may make temporaries here: a cache
    shared by a group (``chmod 2775``) stays writable by the group (the temporaries were in the root
    before; a ``0755`` directory made by the first uploader refused every other user's uploads).
    The sticky bit (chmod(2), S_ISVTX: "only the file's owner, the directory's owner or root may
    remove or rename a file in it") keeps one user's live temporary from being renamed, replaced or
    removed by another, as in ``/tmp``; each temporary is the ``0600`` file of its writer. Changed
    through a descriptor of the directory just made (no link followed); the set-group-ID bit it
    inherited from a group's cache directory is kept; where the file system refuses modes the
    directory stays as made (0700). Raises OSError.
    """
    mode = stat.S_IMODE(os.stat(root).st_mode) & 0o777 | stat.S_ISVTX
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode | os.fstat(fd).st_mode & stat.S_ISGID)  # a set-group-ID root's, inherited, is kept
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EROFS):
            raise  # a file system without modes (vfat, some FUSE and SMB mounts): left as made, this user's own
    finally:
        os.close(fd)


def remove_stale(root: str, *, now: float | None = None) -> list[str]:
    """Remove the temporaries of uploads into `root` whose writer is gone; returns their names.

    A ``.cudapkgs-uploads`` file goes when its lock can be taken (no process holds it) and it is at
    least `STALE_AFTER` s old; an older version's ``.upload-*.nar`` or ``.put-*`` in the root when it
    has not been written for `OLD_STALE_AFTER` s. Links, directories and other kinds are left.
    Never raises for what it finds (a file gone meanwhile, one it may not open): it is skipped."""
    now = time.time() if now is None else now
    removed: list[str] = []
    try:
        directory = _temp_dir(root, create=False)
    except OSError:
        directory = None
    if directory is not None:
        removed += _sweep(directory, lambda name: name.endswith(".part"), STALE_AFTER, now, locked=True)
    removed += _sweep(root, lambda name: (name.startswith(".upload-") and name.endswith(".nar"))
                      or name.startswith(".put-"), OLD_STALE_AFTER, now, locked=False)
    return removed


def _sweep(directory: str, wanted, min_age: float, now: float, *, locked: bool) -> list[str]:  # type: ignore[no-untyped-def]
    removed = []
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return removed
    try:
        with os.scandir(dfd) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES:
                    break
                if wanted(entry.name) and _remove_if_stale(dfd, entry.name, min_age, now, locked=locked):
                    removed.append(entry.name)
    except OSError:
        pass
    finally:
        os.close(dfd)
    return removed


def _remove_if_stale(dfd: int, name: str, min_age: float, now: float, *, locked: bool) -> bool:
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dfd)
    except OSError:  # gone, a link (ELOOP), not ours to read
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < min_age:
            return False
        if locked:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # a live writer holds it
                return False
        here = os.lstat(name, dir_fd=dfd)
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino):  # renamed away and the name reused
            return False
        os.unlink(name, dir_fd=dfd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
