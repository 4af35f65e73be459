"""Outputs built and verified once, kept to be put back after a gc without building or hashing them again.

When a build's outputs are registered with ``reuse`` (`Registration.add_outputs`), each
regular file of each output is hard-linked into ``<store>/.links/<basename>/<n>`` (the same
inodes as the store path's: no byte is copied), and the database records, in the same
store database that says which paths are valid (`cudapkgs.store.db`'s schema):

* ``ReusableOutputs``: the path, its NAR hash and size and references as registered (computed
  from every byte: `nar.hash_and_scan`), and its listing (directories, symlinks with their
  targets, files with their executable bit and pool entry);
* ``ReusableInodes``: for every pool file, the identity it had when the store last touched it:
  device, inode, size, mode, mtime and ctime, in nanoseconds.

A realisation of the same path after `gc` (`restore`) recreates the tree from the listing and
hard-links the pool files back, each only after its ``lstat`` matches that identity. Any
write, truncation, chmod, utime or rename changes the ctime (which no program can set back) or
the inode, so a pool file changed since its bytes were hashed is refused, the record
dropped, and the output built again from its source, every check as before. This is the
reasoning of Nix's optimised store (``.links``, whose entries Nix trusts by name) with a check
of identity on top; what the record holds is as trusted as the store's database itself.

Linking and unlinking a file also change its ctime: the store's own operations on a pool
inode (this module's links, `gc` deleting a store path) check the identity first and record
the new one after. A change made by another process between those two ``lstat`` calls, a
few milliseconds apart inside the store's own locks, would not be seen; a change at any
other moment is.

A record survives one `gc` after its path was collected (``collected`` = 1); the next `gc`
that finds the path still invalid deletes the record and its pool files, so two collections
in a row free the space as before.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import nar

__all__ = ["remember", "restore", "is_reusable", "before_gc", "after_gc", "pool_dir"]


_CANONICAL_MTIME_NS = 1_000_000_000  # the store's mtime, 1 s (`files._make_read_only`)


def pool_dir(root: str | os.PathLike[str], path: str) -> Path:
    """Where the pool files of store path `path` live: ``<root>/.links/<basename>``."""
    return Path(root) / ".links" / os.path.basename(path)


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns


def _is_store_file(st: os.stat_result) -> bool:
    return (stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) in (0o444, 0o555)
            and st.st_mtime_ns == _CANONICAL_MTIME_NS)


def _record_identities(conn: Any, stats: Iterable[os.stat_result]) -> None:
    conn.executemany("INSERT OR REPLACE INTO ReusableInodes (dev, ino, size, mode, mtime_ns, ctime_ns) "
                     "VALUES (?, ?, ?, ?, ?, ?)", [_identity(st) for st in stats])


def remember(db: Any, root: str | os.PathLike[str], path: str, nar_hash: str, nar_size: int,
             references: Iterable[str]) -> bool:
    """Keep the registered store path `path` for `restore`: pool links and its record (see the module).

    Called with the path's lock held, right after it was registered with `nar_hash`,
    `nar_size` and `references`. Returns False, keeping nothing, when the tree holds
    something the store never leaves there (a writable file, an mtime other than 1) or the
    pool cannot be written; raises nothing for that (a pool is an optimisation).
    """
    pool = pool_dir(root, path)
    listing: list[list[Any]] = []
    pooled: list[str] = []
    try:
        _discard_pool(pool)
        pool.parent.mkdir(exist_ok=True)
        building = pool.with_name(f".{pool.name}.{os.getpid()}.{os.urandom(4).hex()}")
        building.mkdir()
        try:
            for rel, st in nar.walk(path):
                full = os.path.join(path, rel) if rel else path
                if stat.S_ISDIR(st.st_mode):
                    listing.append([rel, "d"])
                elif stat.S_ISLNK(st.st_mode):
                    listing.append([rel, "l", os.readlink(full)])
                elif _is_store_file(st):
                    name = str(len(pooled))
                    os.link(full, building / name, follow_symlinks=False)
                    pooled.append(name)
                    listing.append([rel, "f", 1 if st.st_mode & stat.S_IXUSR else 0, name, st.st_dev, st.st_ino])
                else:
                    raise ValueError(f"{full} is not as the store leaves files")
            os.rename(building, pool)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        stats = [os.lstat(pool / name) for name in pooled]  # after the links: their ctimes moved
    except (OSError, ValueError):
        _discard_pool(pool)
        return False
    with db.transaction() as conn:
        conn.execute("INSERT OR REPLACE INTO ReusableOutputs (path, hash, size, refs, listing, collected) "
                     "VALUES (?, ?, ?, ?, ?, 0)",
                     (path, nar_hash, nar_size, json.dumps(sorted(set(references))), json.dumps(listing)))
        _record_identities(conn, stats)
    return True


def is_reusable(db: Any, paths: Iterable[str]) -> bool:
    """Whether every path of `paths` has a record (its pool files are checked only by `restore`)."""
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
    for e in listing:
        if e[1] == "f":
            by_dev.setdefault(int(e[4]), set()).add(int(e[5]))
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


def _matches(st: os.stat_result, entry: list[Any], recorded: Mapping[tuple[int, int], tuple[int, ...]]) -> bool:
    """Whether the pool file of `entry` (its lstat `st`) is the inode recorded, unchanged since."""
    return ((st.st_dev, st.st_ino) == (entry[4], entry[5]) and _is_store_file(st)
            and recorded.get((st.st_dev, st.st_ino)) == _identity(st)[2:]
            and bool(st.st_mode & stat.S_IXUSR) == bool(entry[2]))


def _intact(db: Any, pool: Path, listing: list[list[Any]]) -> bool:
    """Whether every pool file of `listing` still has its recorded identity."""
    try:
        recorded = _recorded(db, listing)
        return all(_matches(os.lstat(pool / str(e[3])), e, recorded) for e in listing if e[1] == "f")
    except (OSError, ValueError, TypeError, IndexError):
        return False


def _safe_rel(rel: Any) -> bool:
    if not isinstance(rel, str):
        return False
    parts = rel.split("/")
    return rel == "" or (not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "\0" not in rel)


def restore(db: Any, root: str | os.PathLike[str], path: str, out: Path,
            allowed_references: Mapping[str, bool]) -> tuple[str, int, set[str], frozenset[str]] | None:
    """Recreate store path `path` at `out` (not existing yet) from its record: (NAR hash, NAR size, references, files).

    Every pool file must still have the identity recorded when its bytes were last known
    to be the ones hashed (see the module); each reference must be a key of
    `allowed_references` whose value says it is (or will be, with this build) valid.
    The tree is left as the store leaves one (directories 0555 with mtime 1, the root
    still writable); `files` names its regular files (hard links to the pool's). None,
    with nothing left at `out`, when there is no record or any check fails; a record with
    a changed pool file is dropped, so the output is built again.
    """
    row = db.conn.execute("SELECT hash, size, refs, listing FROM ReusableOutputs WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    nar_hash, size, refs_json, listing_json = row
    try:
        refs = set(json.loads(refs_json))
        listing = json.loads(listing_json)
    except ValueError:
        forget(db, root, [path])
        return None
    if not all(allowed_references.get(r) for r in refs):
        return None  # an input it referred to is not valid now: build it (and fail as a build would)
    pool = pool_dir(root, path)
    after: list[os.stat_result] = []
    files: list[str] = []
    dirs: list[str] = []
    try:
        if not listing or listing[0][0] != "" or not all(_safe_rel(e[0]) for e in listing):
            raise ValueError("a malformed listing")
        recorded = _recorded(db, listing)
        top, inside, pooled = os.fspath(out), os.fspath(out) + "/", os.fspath(pool) + "/"
        lstat, link = os.lstat, os.link
        made = {""}  # directories made so far: an entry goes only into one (never through a symlink)
        for entry in listing:
            rel, kind = entry[0], entry[1]
            full = inside + rel if rel else top
            if rel and rel.rpartition("/")[0] not in made:
                raise ValueError(f"{rel} is not inside a directory of the listing")
            if kind == "f":
                source = pooled + str(entry[3])
                if not _matches(lstat(source), entry, recorded):
                    raise ValueError(f"{source} changed since it was recorded")
                link(source, full, follow_symlinks=False)
                st = lstat(full)  # the link moved the inode's ctime: recorded anew below
                if (st.st_dev, st.st_ino) != (entry[4], entry[5]) or not _is_store_file(st):
                    raise ValueError(f"{full} changed while it was restored")
                after.append(st)
                files.append(full)
            elif kind == "d":
                os.mkdir(full, 0o755)
                dirs.append(full)
                made.add(rel)
            elif kind == "l":
                os.symlink(entry[2], full)
            else:
                raise ValueError(f"unknown entry kind {kind!r}")
        for full in reversed(dirs):  # children before their directory, as files._make_read_only
            if full != os.fspath(out):
                os.chmod(full, 0o555)
            os.utime(full, (1, 1))
    except (OSError, ValueError, IndexError, TypeError):
        if os.path.lexists(out):
            from .files import _remove_tree

            _remove_tree(out)
        forget(db, root, [path])
        return None
    with db.transaction() as conn:
        _record_identities(conn, after)
        conn.execute("UPDATE ReusableOutputs SET collected = 0 WHERE path = ?", (path,))
    return nar_hash, int(size), refs, frozenset(files)


def forget(db: Any, root: str | os.PathLike[str], paths: Iterable[str]) -> int:
    """Drop the records and pool files of `paths`; the bytes that frees (files whose last link goes)."""
    paths = list(paths)
    if not paths:
        return 0
    with db.transaction() as conn:
        conn.executemany("DELETE FROM ReusableOutputs WHERE path = ?", [(p,) for p in paths])
    freed = 0
    for path in paths:
        pool = pool_dir(root, path)
        try:
            freed += sum(st.st_size for _, st in nar.walk(pool) if stat.S_ISREG(st.st_mode) and st.st_nlink == 1)
        except OSError:
            pass
        _discard_pool(pool)
    return freed


def _discard_pool(pool: Path) -> None:
    if os.path.lexists(pool):
        if pool.is_dir() and not pool.is_symlink():
            shutil.rmtree(pool, ignore_errors=True)
        else:
            pool.unlink()


def _listing(db: Any, path: str) -> list[list[Any]] | None:
    row = db.conn.execute("SELECT listing FROM ReusableOutputs WHERE path = ?", (path,)).fetchone()
    if row is None:
        return None
    try:
        return json.loads(row[0])
    except ValueError:
        return None


def before_gc(db: Any, root: str | os.PathLike[str], dead: Iterable[str]) -> tuple[list[str], int]:
    """Before gc deletes `dead`: records of paths collected twice are dropped, those of changed pool files too.

    Returns the dead paths whose records are kept (for `after_gc`) and the bytes freed by
    dropping the others. Called with gc.lock held.
    """
    dead = list(dead)
    stale = [p for (p,) in db.conn.execute("SELECT path FROM ReusableOutputs WHERE collected = 1")
             if not db.is_valid(p)]
    freed = forget(db, root, stale)
    kept, broken = [], []
    for path in dead:
        listing = _listing(db, path)
        if listing is None:
            continue
        if not _intact(db, pool_dir(root, path), listing):
            broken.append(path)
        else:
            kept.append(path)
    freed += forget(db, root, broken)
    return kept, freed


def after_gc(db: Any, root: str | os.PathLike[str], kept: Iterable[str]) -> None:
    """After gc deleted the paths `kept` (from `before_gc`): record their pool files' new identities, mark them collected."""
    stats, done = [], []
    for path in kept:
        listing = _listing(db, path) or []
        pool = pool_dir(root, path)
        try:
            stats.extend(os.lstat(pool / str(e[3])) for e in listing if e[1] == "f")
            done.append(path)
        except OSError:
            forget(db, root, [path])
    with db.transaction() as conn:
        _record_identities(conn, stats)
        conn.executemany("UPDATE ReusableOutputs SET collected = 1 WHERE path = ?", [(p,) for p in done])
