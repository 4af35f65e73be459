"""Keeping file operations inside one directory tree (a build tree, an unpacked archive).

Lexical checks of a path (no ``..``, not absolute) are not enough once a tree holds
symlinks: ``d/s1 -> ..`` and ``d/s2 -> s1/..`` each look harmless, but ``d/s2``
resolves above the tree.  This module resolves paths the way the kernel would,
against the real tree on disk, with the tree's root acting as ``/`` must not be left:

- `resolve_in_tree` follows every symlink on the way (as ``openat2(RESOLVE_BENEATH)``
  would) and refuses a path that leaves the tree, an absolute link, or a loop;
- `check_tree_links` applies it to every symlink below a root, so that after it
  passes, nothing reached through the tree's symlinks lies outside it;
- `require_real_dirs` refuses a path whose parent directories (below the root)
  include a symlink: hooks that move or delete directories call it, so a planted
  ``lib -> /`` can never make them touch the host;
- `unshare_hardlinks` gives hard-linked files their own inode before anything
  chmods or patches them, so a link to a host file cannot carry the change out.

All functions raise `TreeEscapeError` (a `CudapkgsError`) with the offending path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .errors import CudapkgsError

__all__ = [
    "MAX_LINK_FOLLOWS", "TreeEscapeError", "check_tree_links", "require_real_dirs", "resolve_in_tree",
    "unshare_file", "unshare_hardlinks",
]

# Linux's limit on symlinks followed while resolving one path (MAXSYMLINKS, 40).
MAX_LINK_FOLLOWS = 40


class TreeEscapeError(CudapkgsError):
    """A path, or a symlink on the way to it, leads outside the tree it must stay in, or loops."""


def resolve_in_tree(
    root: str | os.PathLike[str],
    rel: str,
    *,
    allow_absolute: tuple[str, ...] = (),
) -> str | None:
    """Resolve `rel` (relative to `root`) through the tree's symlinks; return the relative result.

    Components that do not exist (yet) are taken lexically, so a dangling link is judged
    by where it would point once its target is created.  An absolute link target is an
    escape unless it starts with one of `allow_absolute` (directory prefixes ending in
    ``/``, e.g. the store directory): then resolution stops there and None is returned,
    as such a link is never followed inside the tree.

    Raises `TreeEscapeError` when the path leaves `root`, meets a forbidden absolute
    link, or follows more than `MAX_LINK_FOLLOWS` links (a loop).
    """
    base = os.fspath(root)
    todo = [c for c in rel.split("/")][::-1]  # a stack: next component last
    current: list[str] = []
    follows = 0
    missing = False
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not current:
                raise TreeEscapeError(f"{rel!r} leads outside {base}")
            current.pop()
            continue
        current.append(part)
        if missing:
            continue
        full = os.path.join(base, *current)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            missing = True
            continue
        if not stat.S_ISLNK(st.st_mode):
            if todo and not stat.S_ISDIR(st.st_mode):
                missing = True  # a file in the middle: the kernel would stop here (ENOTDIR)
            continue
        follows += 1
        if follows > MAX_LINK_FOLLOWS:
            raise TreeEscapeError(f"{rel!r} in {base}: too many levels of symbolic links (a loop)")
        target = os.readlink(full)
        current.pop()
        if target.startswith("/"):
            if any(target.startswith(prefix) for prefix in allow_absolute):
                return None
            raise TreeEscapeError(f"{'/'.join(current + [part])!r} in {base} is an absolute link to {target!r}")
        todo.extend(target.split("/")[::-1])
    return "/".join(current)


def check_tree_links(root: str | os.PathLike[str], *, allow_absolute: tuple[str, ...] = ()) -> int:
    """Check that every symlink below `root` resolves inside it (see `resolve_in_tree`).

    Directories are walked without following links.  Returns the number of links
    checked; raises `TreeEscapeError` naming the first bad one.
    """
    base = os.fspath(root)
    count = 0
    # The entries' kinds as the directory listing gives them (no lstat per file: cuda_cccl has 1,700).
    todo = [base]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    count += 1
                    rel = os.path.relpath(entry.path, base)
                    try:
                        resolve_in_tree(base, rel, allow_absolute=allow_absolute)
                    except TreeEscapeError as error:
                        raise TreeEscapeError(f"the link {rel!r} ({os.readlink(entry.path)!r}) is unsafe: {error}") from None
                elif entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return count


def require_real_dirs(root: str | os.PathLike[str], path: str | os.PathLike[str], *, include_self: bool = False) -> None:
    """Refuse `path` unless it lies lexically below `root` and no directory between them is a symlink.

    With `include_self`, `path` itself must not be a symlink either.  Components that do
    not exist are fine (creating them makes real directories).  Raises `TreeEscapeError`.
    """
    base = os.path.abspath(os.fspath(root))
    full = os.path.abspath(os.fspath(path))
    rel = os.path.relpath(full, base)
    if rel == ".":
        return
    if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
        raise TreeEscapeError(f"{full} is outside {base}")
    parts = rel.split("/")
    check = parts if include_self else parts[:-1]
    current = base
    for part in check:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return
        if stat.S_ISLNK(st.st_mode):
            raise TreeEscapeError(f"{os.path.relpath(current, base)!r} in {base} is a symlink; not following it")


def unshare_hardlinks(root: str | os.PathLike[str]) -> int:
    """Give every regular file below `root` with other hard links its own inode; return how many.

    A hard link made by a build script (``ln``, ``cp -l``) can share its inode with a file
    outside the tree; chmod, utime or an in-place patchelf on it would change that file
    too.  Each such file is copied (mode kept) and the copy renamed over it
    (`unshare_file`).  Directories are walked without following symlinks.
    """
    count = 0
    base = os.fspath(root)
    if os.path.isdir(base) and not os.path.islink(base):
        entries = [os.path.join(d, f) for d, _, files in os.walk(base) for f in files]
    else:
        entries = [base] if os.path.lexists(base) else []
    for full in entries:
        count += unshare_file(full, os.lstat(full))
    return count


def unshare_file(full: str, st: os.stat_result) -> bool:
    """If `full` (with lstat result `st`) is a regular file with other hard links, copy it in place.

    Returns whether it did.  The copy keeps the permission bits; OSError propagates.
    """
    if not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
        return False
    tmp = f"{full}.unshare-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "wb") as out, open(full, "rb") as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
            os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True
