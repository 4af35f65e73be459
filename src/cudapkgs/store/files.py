"""File-system work the store's parts share: read-only trees, removal, links, and OS errors as `StoreError`."""

from __future__ import annotations

import errno
import os
import stat

from ..confine import unshare_file
from ..errors import StoreError
from . import nar

_WRITE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded", errno.EACCES: "permission denied", errno.EPERM: "operation not permitted", errno.EROFS: "read-only file system"}


def _store_error(error: OSError, what: str) -> StoreError:
    reason = _WRITE_ERRNOS.get(error.errno or 0) or error.strerror or str(error)
    where = f" ({error.filename})" if error.filename else ""
    return StoreError(f"{what}: {reason}{where}; the store is unchanged")


def _make_read_only(root: str | os.PathLike[str], *, keep_root_writable: bool = False,
                    keep: frozenset[str] = frozenset()) -> None:
    """Files 0444 (0555 if executable), directories 0555, mtimes 1, as Nix does; symlinks untouched.

    Hard-linked files get their own inode first (`confine.unshare_file`), except those in
    `keep` (checked links into the store, already read-only with mtime 1: left as they are)."""
    entries = list(nar.walk(root))
    for rel, st in reversed(entries):  # children before their directory
        full = os.path.join(root, rel) if rel else os.fspath(root)
        if stat.S_ISLNK(st.st_mode) or full in keep:
            continue
        if stat.S_ISDIR(st.st_mode):
            if not (rel == "" and keep_root_writable):
                os.chmod(full, 0o555)
        else:
            unshare_file(full, st)  # a hard link to a file outside must not be chmodded with it
            os.chmod(full, 0o555 if st.st_mode & stat.S_IXUSR else 0o444)
        os.utime(full, (1, 1))


def _freeze(path: str) -> None:
    os.chmod(path, 0o555)
    os.utime(path, (1, 1))


def _remove_tree(path: str | os.PathLike[str]) -> None:
    """Delete a file or tree, first making read-only directories writable."""
    path = os.fspath(path)
    if os.path.islink(path) or not os.path.isdir(path):
        if os.path.lexists(path):
            os.unlink(path)
        return
    for dirpath, dirnames, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
        for d in dirnames:
            full = os.path.join(dirpath, d)
            if not os.path.islink(full):
                os.chmod(full, 0o755)
    import shutil  # here: shutil imports bz2 and lzma, which opening the store does not need

    shutil.rmtree(path)


def _replace_symlink(link: str | os.PathLike[str], target: str) -> None:
    tmp = f"{os.fspath(link)}.tmp-{os.urandom(16).hex()}"  # uuid would import platform (10 ms)
    os.symlink(target, tmp)
    os.replace(tmp, link)
