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
from collections.abc import Callable, Mapping

from .errors import CudapkgsError

__all__ = [
    "MAX_LINK_FOLLOWS", "TreeEscapeError", "check_store_path_links", "check_tree_links", "disk_lookup",
    "require_real_dirs", "resolve_in_tree",
    "unshare_file", "unshare_hardlinks",
]

# Linux's limit on symlinks followed while resolving one path (MAXSYMLINKS, 40).
MAX_LINK_FOLLOWS = 40


class TreeEscapeError(CudapkgsError):
    """A path, or a symlink on the way to it, leads outside the tree it must stay in, or loops."""


#: What `resolve_in_tree` needs to know of one entry: ("dir" | "link" | "other", the link's target or
#: None), or None when there is no such entry.  A `Lookup` answers it for a tuple of path components.
Entry = tuple[str, "str | None"]
Lookup = Callable[[tuple[str, ...]], "Entry | None"]


def disk_lookup(root: str | os.PathLike[str], mounts: Mapping[str, str | os.PathLike[str]] | None = None) -> Lookup:
    """A `Lookup` reading the tree at `root` on disk (``lstat``, ``readlink``), where the first component
    named in `mounts` is read from that directory instead (a store path still in its staging directory)."""
    base = os.fspath(root)
    mounted = {name: os.fspath(where) for name, where in (mounts or {}).items()}

    def look(parts: tuple[str, ...]) -> Entry | None:
        full = os.path.join(mounted[parts[0]], *parts[1:]) if parts[0] in mounted else os.path.join(base, *parts)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return "link", os.readlink(full)
        return ("dir" if stat.S_ISDIR(st.st_mode) else "other"), None

    return look


def resolve_in_tree(
    root: str | os.PathLike[str],
    rel: str,
    *,
    allow_absolute: tuple[str, ...] = (),
    look: Lookup | None = None,
    known_top: Callable[[str], bool] | None = None,
) -> str | None:
    """Resolve `rel` (relative to `root`) through the tree's symlinks; return the relative result.

    Components that do not exist (yet) are taken lexically, so a dangling link is judged
    by where it would point once its target is created.  An absolute link target is an
    escape unless it starts with one of `allow_absolute` (directory prefixes ending in
    ``/``, e.g. the store directory): then resolution stops there and None is returned,
    as such a link is never followed inside the tree.  `look` says what an entry is (default:
    `disk_lookup(root)`, the real tree); with `known_top`, a first component for which it is
    false and that does not exist is refused rather than taken lexically (a store path that is
    not there: what its links will be is unknown).

    Raises `TreeEscapeError` when the path leaves `root`, meets a forbidden absolute
    link, or follows more than `MAX_LINK_FOLLOWS` links (a loop).
    """
    base = os.fspath(root)
    look = look or disk_lookup(base)
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
        found = look(tuple(current))
        if found is None:
            if known_top is not None and len(current) == 1 and not known_top(part):
                raise TreeEscapeError(f"{rel!r} leads into {os.path.join(base, part)!r}, which is not there")
            missing = True
            continue
        kind, target = found
        if kind != "link":
            if todo and kind != "dir":
                missing = True  # a file in the middle: the kernel would stop here (ENOTDIR)
            continue
        follows += 1
        if follows > MAX_LINK_FOLLOWS:
            raise TreeEscapeError(f"{rel!r} in {base}: too many levels of symbolic links (a loop)")
        assert target is not None
        current.pop()
        if target.startswith("/"):
            if any(target.startswith(prefix) for prefix in allow_absolute):
                return None
            raise TreeEscapeError(f"{'/'.join(current + [part])!r} in {base} is an absolute link to {target!r}")
        todo.extend(target.split("/")[::-1])
    return "/".join(current)


def check_store_path_links(tree: str | os.PathLike[str], store_dir: str, name: str) -> int:
    """Check that every relative symlink of a store path about to be registered stays inside the store.

    `tree` holds the contents of ``<store_dir>/<name>`` (a staging directory, or a single link or
    file).  Each relative link is resolved as the kernel will resolve it once the tree is at its
    place: through the tree's own links and through those of the other store paths it reaches
    (read on disk), with `store_dir` acting as ``/``; so a chain (``a/s1 -> ..``, ``a/s2 -> s1/../..``)
    whose links each look harmless is refused when together they climb out of the store, and so
    is a link into a store path that is not there.  An absolute link may point anywhere (Nix's
    rule; nvcc's ccbin links to the host compiler): it is never followed here.  The rule of
    `cudapkgs import` and substitution alike (NixOS/nix restores any symlink: this is cudapkgs'
    own rule).  Returns the number of relative links checked; raises `TreeEscapeError` naming the
    first bad one.
    """
    tree = os.fspath(tree)
    disk = disk_lookup(store_dir, {name: tree})

    def look(parts: tuple[str, ...]) -> Entry | None:  # the store's own files (.meta, .tmp, ...) are no store path
        return None if parts[0].startswith(".") else disk(parts)

    def check(rel: str) -> None:
        try:
            resolve_in_tree(store_dir, rel, allow_absolute=("/",), look=look,
                            known_top=lambda top: top == name)
        except TreeEscapeError as error:
            target = os.readlink(os.path.join(tree, *rel.split("/")[1:]))
            raise TreeEscapeError(f"the link {rel!r} ({target!r}) climbs out of the store {store_dir}: {error}") from None

    count = 0
    if os.path.islink(tree):
        if not os.readlink(tree).startswith("/"):
            check(name)
            count += 1
        return count
    if not os.path.isdir(tree):
        return 0
    todo = [tree]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    if not os.readlink(entry.path).startswith("/"):
                        count += 1
                        check(f"{name}/{os.path.relpath(entry.path, tree)}")
                elif entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
    return count


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
