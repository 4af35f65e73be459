"""The symbolic links a path's resolution follows, and who owns them.

Whoever owns a link decides where it leads, at any moment: checking the directories a path
resolves to (``realpath``) says where it leads now, not where it will lead while a command uses it.
Nix refuses any link in the path of its store and its parents for that reason
(NixOS/nix src/libstore/local-store.cc, ``LocalStore::LocalStore``: "the path '…' is a symlink;
this is not allowed for the Nix store and its parent directories"); cudapkgs accepts a link that
the current user or root owns (a home directory moved to another disk through a link is common)
and refuses one of anyone else (`foreign_link`).  Linux's ``fs.protected_symlinks`` refuses to
follow such a link in a sticky world-writable directory such as ``/tmp``, but it is a setting
(0 on some hosts and in many containers).

Imports only `os` and `stat`: the evaluation cache's fast path (`cudapkgs.evalcache.lookup`) uses it.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["MAX_LINKS", "foreign_link", "links_followed"]

#: Links followed in resolving one path at most (Linux's MAXSYMLINKS, 40: more is ELOOP).
MAX_LINKS = 40


def links_followed(path: str | os.PathLike[str]) -> Iterator[tuple[str, os.stat_result]]:
    """Each symbolic link resolving the absolute `path` goes through, in order, as (the link's path with
    every link before it resolved, its ``lstat``): its components and those of every link target,
    ``..`` taken after the link before it (as the kernel does).  Stops at the first component that
    does not exist or cannot be looked at, and after `MAX_LINKS` links.  Raises ValueError for a
    relative `path`; never follows a link to look at it (``lstat``, ``readlink``)."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        raise ValueError(f"{text!r} is not an absolute path")
    pending = [part for part in reversed(text.split("/")) if part]  # the next component last
    current = "/"
    followed = 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            st = os.lstat(candidate)
        except OSError:
            return
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        yield candidate, st
        followed += 1
        if followed >= MAX_LINKS:
            return
        try:
            target = os.readlink(candidate)
        except OSError:
            return
        if target.startswith("/"):
            current = "/"
        pending.extend(p for p in reversed(target.split("/")) if p)


def foreign_link(path: str | os.PathLike[str], trusted: tuple[int, ...] | frozenset[int] | set[int]) -> tuple[str, int] | None:
    """The first link resolving the absolute `path` follows whose owner is not in `trusted` (uids), as
    (its path, its owner's uid); None when every link on the way is a trusted user's (or there is none).
    Raises ValueError for a relative `path`."""
    for link, st in links_followed(path):
        if st.st_uid not in trusted:
            return link, st.st_uid
    return None
