"""Outputs built and verified once, kept by gc to be put back later without building or hashing them again.

When a build's outputs are registered with ``reuse`` (`Registration.add_outputs`), the store
database (the same one that says which paths are valid: `cudapkgs.store.db`'s schema) records:

* ``ReusableOutputs``: the path, its NAR hash, NAR size and references as registered (computed
  from every byte: `nar.hash_and_scan`), and its listing: every directory, symlink (with its
  target) and file (with its executable bit), in NAR order, each with its device and inode;
* ``ReusableInodes``: the identity every one of those inodes has once the path is in the
  store: device, inode, size, mode, mtime and ctime, in nanoseconds.

`gc` does not delete such a path: it renames the whole tree to ``<store>/.links/<basename>``
(one rename: no file is touched, so no identity changes). A later realisation of the same
path (`restore`) renames it back into the build's temporary directory and then checks the
tree entry by entry against the listing: the same names and kinds in the same order, nothing
more, the same symlink targets, every file and subdirectory the same inode with the recorded
size, mode, mtime and ctime. Any write, truncation, chmod, utime, link, unlink or rename of
an entry changes its ctime (which no program can set back) or its inode or the listing, so
a tree changed since its bytes were hashed is refused: removed, its record dropped, and the
output built again from its source with every check as before. The check runs after the
tree has left the pool, inside the build's locked directory: a change after it is a change
to the store path itself, which only `verify` finds, as for any valid path. This is the
reasoning of Nix's optimised store (``.links``, whose entries Nix trusts by name and size),
with every identity checked on top.

Inodes are shared between outputs (nvcc's ``nvvm/`` is hard links to libnvvm's files): their
identities are one row each, recorded anew by each registration that includes them.

A kept tree survives one `gc` (``collected`` = 1); the next `gc` that finds its path still
invalid deletes the tree and the record, so two collections in a row free the space as before.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from . import nar

__all__ = ["remember", "restore", "is_reusable", "recorded_paths", "stale", "before_gc", "keep", "after_gc", "forget", "pool_dir"]

_CANONICAL_MTIME_NS = 1_000_000_000  # the store's mtime, 1 s (`files._make_read_only`)


def pool_dir(root: str | os.PathLike[str], path: str) -> Path:
    """Where gc keeps the tree of store path `path`: ``<root>/.links/<basename>``."""
    return Path(root) / ".links" / os.path.basename(path)


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns


def _canonical(st: os.stat_result) -> bool:
    """As the store leaves a file or directory: mode 0444/0555 (files) or 0555 (directories), mtime 1."""
    if st.st_mtime_ns != _CANONICAL_MTIME_NS:
        return False
    if stat.S_ISDIR(st.st_mode):
        return stat.S_IMODE(st.st_mode) == 0o555
    return stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) in (0o444, 0o555)


def remember(db: Any, root: str | os.PathLike[str], path: str, nar_hash: str, nar_size: int,
             references: Iterable[str]) -> bool:
    """Record the registered store path `path` for `restore` (see the module).

    Called with the path's lock held, right after it was registered with `nar_hash`,
    `nar_size` and `references`. Returns False, recording nothing, when the tree holds
    something the store never leaves there (a writable file, an mtime other than 1) or
    cannot be read; raises nothing for that (keeping outputs is an optimisation).
    """
    listing: list[list[Any]] = []
    stats: list[os.stat_result] = []
    try:
        for rel, st in _walk(path):
            mode = st.st_mode
            if not rel:  # the root: renamed by gc and restore, so its own ctime is not kept
                if not stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
                    return False  # a single file or symlink: not kept
                listing.append([rel, "d", 1, 0, 0])
                continue
            if stat.S_ISLNK(mode):
                listing.append([rel, "l", os.readlink(path + "/" + rel)])
                continue
            if not _canonical(st):
                return False
            listing.append([rel, "d" if stat.S_ISDIR(mode) else "f", 1 if mode & stat.S_IXUSR else 0, st.st_dev, st.st_ino])
            stats.append(st)
    except (OSError, ValueError):
        return False
    with db.transaction() as conn:
        conn.execute("INSERT OR REPLACE INTO ReusableOutputs (path, hash, size, refs, listing, collected) "
                     "VALUES (?, ?, ?, ?, ?, 0)",
                     (path, nar_hash, nar_size, json.dumps(sorted(set(references))), json.dumps(listing)))
        conn.executemany("INSERT OR REPLACE INTO ReusableInodes (dev, ino, size, mode, mtime_ns, ctime_ns) "
                         "VALUES (?, ?, ?, ?, ?, ?)", [_identity(st) for st in stats])
    return True


def is_reusable(db: Any, paths: Iterable[str]) -> bool:
    """Whether every path of `paths` has a record (the tree itself is checked only by `restore`)."""
    wanted = list(dict.fromkeys(paths))
    conn = getattr(db, "conn", None)  # a dry run's stand-in for a store not made yet has no database
    if not wanted or conn is None:
        return False
    marks = ",".join("?" * len(wanted))
    try:
        found = conn.execute(f"SELECT count(*) FROM ReusableOutputs WHERE path IN ({marks})", wanted).fetchone()[0]
    except sqlite3.OperationalError:  # a read-only store whose database predates the table
        return False
    return found == len(wanted)


def _recorded(db: Any, listing: list[list[Any]]) -> dict[tuple[int, int], tuple[int, int, int, int]]:
    """The recorded identities of the inodes `listing` names: (dev, ino) -> (size, mode, mtime_ns, ctime_ns)."""
    found: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    by_dev: dict[int, set[int]] = {}
    for e in listing[1:]:
        if e[1] in ("f", "d"):
            by_dev.setdefault(int(e[3]), set()).add(int(e[4]))
    for dev, inodes in by_dev.items():
        ordered = sorted(inodes)
        for i in range(0, len(ordered), 500):
            chunk = ordered[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for ino, *rest in db.conn.execute(  # the primary key's index: (dev, ino)
                    f"SELECT ino, size, mode, mtime_ns, ctime_ns FROM ReusableInodes WHERE dev = ? AND ino IN ({marks})",
                    [dev, *chunk]):
                found[(dev, ino)] = tuple(rest)
    return found


def _walk(root: str) -> Any:
    """(relative path, lstat) of `root` and everything under it, in NAR order, as `nar.walk` (string paths: faster)."""
    lstat, listdir = os.lstat, os.listdir

    def visit(rel: str, full: str) -> Any:
        st = lstat(full)
        yield rel, st
        if stat.S_ISDIR(st.st_mode):
            prefix, base = (rel + "/" if rel else ""), full + "/"
            for name in sorted(listdir(full)):
                yield from visit(prefix + name, base + name)

    return visit("", root)


def _check_tree(db: Any, tree: str, listing: list[list[Any]]) -> None:
    """Raise ValueError unless `tree` is exactly what `listing` records, every inode unchanged."""
    recorded = _recorded(db, listing)
    entries = _walk(tree)
    count = 0
    for entry, (rel, st) in zip(listing, entries):
        count += 1
        kind = entry[1]
        if rel != entry[0]:
            raise ValueError(f"{tree}: {rel!r} where the listing has {entry[0]!r}")
        if kind == "l":
            if not stat.S_ISLNK(st.st_mode) or os.readlink(tree + "/" + rel) != entry[2]:
                raise ValueError(f"{tree}/{rel}: not the symlink recorded")
            continue
        if kind not in ("d", "f") or stat.S_ISDIR(st.st_mode) != (kind == "d"):
            raise ValueError(f"{tree}/{rel}: not the kind recorded")
        if not rel:
            continue
        if ((st.st_dev, st.st_ino) != (entry[3], entry[4]) or not _canonical(st)
                or recorded.get((st.st_dev, st.st_ino)) != _identity(st)[2:]
                or bool(st.st_mode & stat.S_IXUSR) != bool(entry[2])):
            raise ValueError(f"{tree}/{rel}: changed since its bytes were hashed")
    if count != len(listing) or next(entries, None) is not None:
        raise ValueError(f"{tree}: not the entries recorded")


def restore(db: Any, root: str | os.PathLike[str], path: str, out: Path,
            allowed_references: Mapping[str, bool]) -> tuple[str, int, set[str]] | None:
    """Put the kept tree of store path `path` at `out` (not existing yet): (NAR hash, NAR size, references).

    The tree is renamed from the pool, then checked against its record (see the module);
    each recorded reference must be a key of `allowed_references` whose value says it is
    (or will be, with this build) valid. It is left as the store leaves one, its root
    writable. None, with nothing left at `out`, when there is no record or kept tree, or
    any check fails; a tree that fails its check is deleted with its record, so the
    output is built again.
    """
    row = db.conn.execute("SELECT hash, size, refs, listing FROM ReusableOutputs WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    nar_hash, size, refs_json, listing_json = row
    pool = pool_dir(root, path)
    try:
        refs = set(json.loads(refs_json))
        listing = json.loads(listing_json)
        if not isinstance(listing, list) or not listing or not all(isinstance(e, list) and e for e in listing):
            raise ValueError("a malformed listing")
    except ValueError:
        forget(db, root, [path])
        return None
    if not all(allowed_references.get(r) for r in refs):
        return None  # an input it referred to is not valid now: build it (and fail as a build would)
    if not pool.is_dir() or pool.is_symlink():
        return None  # not collected (valid elsewhere meanwhile), or the pool is gone
    try:
        os.rename(pool, out)
    except OSError:
        return None
    try:
        _check_tree(db, os.fspath(out), listing)
    except (OSError, ValueError, IndexError, TypeError):
        from .files import _remove_tree

        _remove_tree(out)
        forget(db, root, [path])
        return None
    with db.transaction() as conn:
        conn.execute("UPDATE ReusableOutputs SET collected = 0 WHERE path = ?", (path,))
    return nar_hash, int(size), refs


def forget(db: Any, root: str | os.PathLike[str], paths: Iterable[str]) -> int:
    """Drop the records and kept trees of `paths`; the bytes that frees (files whose last link goes)."""
    from .files import _remove_tree

    paths = list(paths)
    if not paths:
        return 0
    with db.transaction() as conn:
        conn.executemany("DELETE FROM ReusableOutputs WHERE path = ?", [(p,) for p in paths])
    freed = 0
    for path in paths:
        pool = pool_dir(root, path)
        if not os.path.lexists(pool):
            continue
        try:
            freed += sum(st.st_size for _, st in nar.walk(pool) if not stat.S_ISDIR(st.st_mode) and st.st_nlink == 1)
        except OSError:
            pass
        try:
            _remove_tree(pool)
        except OSError:
            pass
    return freed


def stale(db: Any, root: str | os.PathLike[str]) -> list[str]:
    """The paths whose trees the last gc kept (`keep`) and that are still invalid: the next gc deletes their trees."""
    try:
        rows = db.conn.execute("SELECT path FROM ReusableOutputs WHERE collected = 1 ORDER BY path").fetchall()
    except sqlite3.OperationalError:  # a read-only store whose database predates the table
        return []
    return [p for (p,) in rows if not db.is_valid(p) and os.path.lexists(pool_dir(root, p))]


def before_gc(db: Any, root: str | os.PathLike[str], dead: Iterable[str]) -> tuple[set[str], list[str], int]:
    """Before gc deletes `dead`: the trees kept by the last gc whose paths are still invalid are deleted.

    Returns the dead paths to keep (those with a record: `keep` instead of deleting them),
    the paths whose kept trees were deleted (`stale`) and the bytes that freed. Called with
    gc.lock held.
    """
    gone = stale(db, root)
    old = [p for (p,) in db.conn.execute("SELECT path FROM ReusableOutputs WHERE collected = 1")
           if not db.is_valid(p)]
    freed = forget(db, root, old)  # records without a tree go too
    return recorded_paths(db, dead), gone, freed


def recorded_paths(db: Any, paths: Iterable[str]) -> set[str]:
    """The paths among `paths` that have a record (gc keeps those aside instead of deleting them)."""
    wanted = list(paths)
    found: set[str] = set()
    try:
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            marks = ",".join("?" * len(chunk))
            found.update(p for (p,) in db.conn.execute(f"SELECT path FROM ReusableOutputs WHERE path IN ({marks})", chunk))
    except sqlite3.OperationalError:  # a read-only store whose database predates the table
        return set()
    return found


def keep(root: str | os.PathLike[str], path: str) -> bool:
    """Move the dead store path `path` into the pool (one rename); False if it cannot be (then delete it)."""
    from .files import _remove_tree

    pool = pool_dir(root, path)
    try:
        pool.parent.mkdir(exist_ok=True)
        if os.path.lexists(pool):
            _remove_tree(pool)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o755)  # moving a directory to another parent updates its '..'
        os.rename(path, pool)
    except OSError:
        return False
    return True


def after_gc(db: Any, kept: Iterable[str]) -> None:
    """Mark the paths gc kept (`keep`) as collected; the next gc deletes them if they are still invalid."""
    with db.transaction() as conn:
        conn.executemany("UPDATE ReusableOutputs SET collected = 1 WHERE path = ?", [(p,) for p in kept])
