"""What keeps store paths alive, and the garbage collector that deletes the rest (part of `Store`).

Roots: direct ones (``.gcroots/profiles/<name>``), indirect ones (``.gcroots/auto/`` links to
links such as ``./result``) and temporary ones (``.temproots/<pid>-…``, held by a lock while
their process lives, as Nix's temproots).  `gc` holds ``.locks/gc.lock`` exclusively; adding a
path or a root (`add_root`, `add_indirect_root`) holds it shared (`_gc_shared`), so a
collection never deletes what is being added, and the roots it read stay all the roots.
Every path registration makes valid (or finds valid) becomes a temporary root of the
registering Store before that shared lock is released, as Nix's `addTempRoot` comes before
`registerValidPath`: from registration until the caller's own root exists (``./result``,
made before the Store is closed), no gc can take it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..errors import StoreError
from . import nar, reuse
from .files import _remove_tree, _replace_symlink, _store_error
from .locks import PathLock, acquire_saying_so, lock_file_for
from .paths import base32_encode, compress_hash

if TYPE_CHECKING:
    from .db import StoreDB
    from .graph import StoreGraph

__all__ = ["GCResult", "GarbageCollector"]


class GCResult(NamedTuple):
    """What a garbage collection deleted (or would delete, in a dry run).

    `deleted`: the store paths that are no longer (would no longer be) in the store;
    `bytes_freed`: the bytes that frees now, the trees the last gc kept aside included;
    `kept_aside`: those of `deleted` moved whole to ``<store>/.links`` for a later build to
    put back (`cudapkgs.store.reuse`), holding `bytes_kept_aside` bytes that the next gc
    frees; `pool_freed`: the paths whose trees the last gc kept aside and this one deleted;
    `roots`: what kept the rest, one (root link, store path it names, size of that path's closure
    in paths) per GC root, sorted by link; `temp_rooted`: the paths running processes held
    (temporary roots, Nix's temproots).
    """

    deleted: list[str]
    bytes_freed: int = 0
    dry_run: bool = False
    kept_aside: tuple[str, ...] = ()
    bytes_kept_aside: int = 0
    pool_freed: tuple[str, ...] = ()
    roots: tuple[tuple[str, str, int], ...] = ()
    temp_rooted: int = 0


class GarbageCollector:
    """GC roots, temporary roots and `gc` (a part of `cudapkgs.store.store.Store`).

    Uses the other parts: `Store.parse`, `Store.query`, `Store.graph`, `WorkDirs._clean_tmp`.
    """

    db: StoreDB  # these are set by Store.__init__
    root: Path
    store_dir: str
    locks_dir: Path
    gcroots_dir: Path
    _temp_roots: tuple[PathLock, Path] | None
    _rooted: set[str]  # the paths this Store's temporary roots file names
    _gc_shared_depth: int  # how deep this Store is in `_gc_shared` blocks

    # -- temporary roots -------------------------------------------------

    def add_temp_roots(self, paths: Iterable[str]) -> None:
        """Keep `paths` alive until this Store is closed or the process ends (Nix's temproots).

        A build's outputs are valid before its caller links them as `result`; a gc in
        between must not collect them. The roots live in `<store>/.temproots/<pid>-…`,
        locked by this process; gc honours the files whose lock is held and deletes the rest.
        The file is written with the gc lock held shared, so a gc never reads half a line; a
        path this Store already roots is not written again. This roots what is valid *now*:
        a caller holding no lock since it learnt a path was valid uses `protect`, which says
        which of its paths are still there.
        """
        if self._temp_roots is not None and not self._temp_roots[0].locked:
            # A forked child (its copy of the parent's lock was dropped, `locks`): the file and the roots are
            # the parent's, kept while the parent lives; this process makes its own.
            self._temp_roots = None
            self._rooted.clear()
        paths = [p for p in dict.fromkeys(self.parse(p) for p in paths) if p not in self._rooted]
        if not paths:
            return
        with self._gc_shared():
            if self._temp_roots is None:
                file = self.root / ".temproots" / f"{os.getpid()}-{os.urandom(16).hex()}"
                lock = PathLock(file.with_name(file.name + ".lock"))
                lock.acquire()  # before the file exists: gc never takes a live file for a stale one
                self._temp_roots = (lock, file)
            with open(self._temp_roots[1], "a") as f:
                f.write("".join(p + "\n" for p in paths))
            self._rooted.update(paths)

    def protect(self, paths: Iterable[str]) -> list[str]:
        """Make the valid ones among `paths` temporary roots (`add_temp_roots`) atomically w.r.t. gc.

        The gc lock is held shared meanwhile, so a gc that has not started yet will see
        the roots and one that is running finishes first; a path valid when this returns
        stays valid until the Store is closed.  Returns the paths rooted (sorted); a user
        who cannot write the store roots nothing and gets [].
        """
        inside = self.store_dir + "/"
        wanted = sorted({p for p in paths if isinstance(p, str) and p.startswith(inside)})
        try:
            return self._root_the_valid(wanted)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return []  # a user who cannot write the store cannot build either (a dry run still plans)
            raise

    def _root_the_valid(self, paths: list[str]) -> list[str]:
        """Root the valid ones among `paths` (store paths) under the shared gc lock; returns them.

        What registration calls before trusting that a path it found valid stays so (its
        OSError is the caller's to report).
        """
        if not paths:
            return []
        with self._gc_shared():
            invalid = set(self.db.invalid_paths(paths))  # one query
            valid = [p for p in paths if p not in invalid]
            if valid:
                self.add_temp_roots(valid)
        return valid

    def _live_temp_roots(self, remove_stale: bool, graph: StoreGraph | None = None) -> set[str]:
        found: set[str] = set()
        is_valid = graph.is_valid if graph is not None else self.db.is_valid
        directory = self.root / ".temproots"
        for file in sorted(directory.glob("*")):
            if file.name.endswith(".lock"):
                continue
            lock = PathLock(file.with_name(file.name + ".lock"))
            if lock.acquire(blocking=False):  # its process is gone
                if remove_stale:
                    file.unlink(missing_ok=True)
                    lock.release_and_delete()
                else:
                    lock.release()
                continue
            try:
                found.update(line for line in file.read_text().splitlines() if is_valid(line))
            except FileNotFoundError:
                pass
        return found

    def release_temp_roots(self) -> None:
        """Drop every temporary root of this Store: delete its file and release its lock.

        `close` does it; a long-lived program that has rooted what it keeps (links, profiles)
        calls it to let a gc take the rest, as the end of a process would.
        """
        if self._temp_roots is not None:
            lock, file = self._temp_roots
            if lock.locked:  # not in a forked child: the file is the parent's, its roots the parent's to drop
                file.unlink(missing_ok=True)
            lock.release_and_delete()
            self._temp_roots = None
        self._rooted.clear()

    @contextmanager
    def _gc_shared(self) -> Iterator[None]:
        """Hold ``.locks/gc.lock`` shared for the block (re-entrant within this Store).

        A running `cudapkgs gc` holds it exclusively: a build waiting here says so
        (locks.wait_notice).
        """
        if self._gc_shared_depth:
            self._gc_shared_depth += 1
            try:
                yield
            finally:
                self._gc_shared_depth -= 1
            return
        lock = acquire_saying_so(PathLock(self.locks_dir / "gc.lock", shared=True),
                                 f"the store {self.store_dir} (a garbage collection of it is running)")
        self._gc_shared_depth = 1
        try:
            yield
        finally:
            self._gc_shared_depth = 0
            lock.release()

    # -- roots -----------------------------------------------------------

    def add_root(self, name: str, store_path: str) -> Path:
        """A direct GC root `<store>/.gcroots/profiles/<name>` pointing at `store_path`.

        Made under the shared gc lock, as `add_indirect_root`. Raises StoreError (a bad
        name, an invalid path).
        """
        link = self.gcroots_dir / "profiles" / name
        if "/" in name or name.startswith("."):
            raise StoreError(f"invalid GC root name {name!r}")
        try:
            with self._gc_shared():
                target = self.query(store_path).path
                _replace_symlink(link, target)
        except OSError as error:
            raise _store_error(error, f"cannot create the GC root {link}") from error
        return link

    def add_indirect_root(self, link_path: str | os.PathLike[str], store_path: str) -> Path:
        """Make `link_path` (e.g. ./result) a symlink to `store_path` and register it as a GC root.

        The root lives as long as `link_path` exists and points into the store.

        The link and its entry are made with the gc lock held shared, as Nix's `addPermRoot`
        waits for a running GC (`syncWithGC`, src/libstore/gc.cc in Nix 2.3: "This prevents
        the set of permanent roots from increasing while a GC is in progress"). `gc` reads the
        permanent roots, then the temporary ones: a root made between the two, the temporary
        root that kept the path until then dropped next (`cudapkgs build -o res` closing its
        Store), was in neither, and the path was collected (issue 23). The path's validity is
        checked under the same lock. Raises StoreError.
        """
        link = Path(os.path.abspath(link_path))
        if os.path.lexists(link) and not os.path.islink(link):
            raise StoreError(f"'{link}' exists and is not a symlink; not replacing it")
        try:
            with self._gc_shared():
                target = self.query(store_path).path
                _replace_symlink(link, target)
                auto_name = base32_encode(compress_hash(hashlib.sha256(os.fsencode(link)).digest()))
                _replace_symlink(self.gcroots_dir / "auto" / auto_name, os.fspath(link))
        except OSError as error:
            raise _store_error(error, f"cannot create the GC root {link}") from error
        return link

    def roots(self, *, remove_stale: bool = False, graph: StoreGraph | None = None) -> dict[str, str]:
        """Map each live GC root link to the store path it keeps alive.

        Indirect roots whose link is gone or no longer points into the store
        are stale; `remove_stale` deletes their entries under `.gcroots/auto`.
        """
        found: dict[str, str] = {}
        auto_dir = os.fspath(self.gcroots_dir / "auto")
        for dirpath, dirnames, filenames in os.walk(self.gcroots_dir):
            for entry in sorted(dirnames + filenames):
                link = os.path.join(dirpath, entry)
                try:
                    target = os.path.join(dirpath, os.readlink(link))
                except OSError as error:
                    if error.errno in (errno.EINVAL, errno.ENOENT):
                        continue  # not a link, or gone since the listing (a ``.tmp-`` entry renamed into place)
                    raise
                if dirpath == auto_dir:
                    store_path = self._root_target(target, graph)
                    if store_path is None:
                        if remove_stale and _stale_link(target):
                            try:
                                os.unlink(link)
                            except FileNotFoundError:
                                pass
                        continue
                    found[os.path.normpath(target)] = store_path
                else:
                    store_path = self._root_target(link, graph)
                    if store_path is not None:
                        found[link] = store_path
        return found

    def _root_target(self, link: str, graph: StoreGraph | None = None) -> str | None:
        if not os.path.islink(link):
            return None
        try:
            store_path = self.parse(link)
        except (StoreError, FileNotFoundError):  # not into the store, or removed while it was followed
            return None
        valid = graph.is_valid(store_path) if graph is not None else self.db.is_valid(store_path)
        return store_path if valid else None

    # -- garbage collection ----------------------------------------------

    def gc(self, dry_run: bool = False) -> GCResult:
        """Delete every path outside the closure of the GC roots (and stale roots, and leftovers).

        The temporary roots of every Store, this one's included, are roots: what this Store
        added or counted on (`protect`) stays until it is closed.
        """
        with _held(acquire_saying_so(PathLock(self.locks_dir / "gc.lock"),
                                     f"the store {self.store_dir} for a garbage collection (builds or another gc are using it)")):
            if not dry_run:
                self._clean_tmp()  # work and build directories of killed builds
            graph = self.graph()  # one pass over the database; gc.lock keeps it current
            root_links = self.roots(remove_stale=not dry_run, graph=graph)
            temp = self._live_temp_roots(not dry_run, graph)
            live = graph.closure(set(root_links.values()) | temp)
            kept_by = tuple(sorted((link, path, len(graph.closure({path}))) for link, path in root_links.items()))
            held: dict[str, PathLock] = {}
            busy: set[str] = set()
            try:
                for path in sorted(graph.rows):
                    if path in live:
                        continue
                    lock = PathLock(lock_file_for(self.locks_dir, path))
                    if lock.acquire(blocking=False):
                        held[path] = lock
                    else:
                        busy.add(path)
                if busy:  # being worked on by another process: keep them and what they need
                    live |= graph.closure(busy)
                    for path in list(held):
                        if path in live:
                            held.pop(path).release()
                dead = sorted(held)
                junk = self._unregistered_entries(set(graph.rows))
                if dry_run:  # what a gc would delete now; the paths it would keep aside free nothing yet
                    pool_freed = reuse.stale(self.db, self.root)
                    kept = sorted(reuse.recorded_paths(self.db, dead))
                    freed, kept_bytes = _bytes_split(dead + junk, set(kept))
                    freed += _bytes_split([os.fspath(reuse.pool_dir(self.root, p)) for p in pool_freed], set())[0]
                else:
                    try:
                        # Outputs recorded for reuse are moved aside whole (`reuse.keep`), not deleted; those
                        # the last gc kept and nothing brought back are deleted now.
                        reusable, pool_freed, freed = reuse.before_gc(self.db, self.root, dead)
                        now, kept_bytes = _bytes_split(dead + junk, reusable)
                        freed += now
                        self.db.invalidate(dead)  # forget first: a crash now leaves only unregistered junk
                        kept = []
                        for path in dead + junk:
                            if path in reusable and reuse.keep(self.root, path):
                                kept.append(path)
                            else:
                                _remove_tree(path)
                        if len(kept) < len(reusable):  # a tree that could not be moved aside was deleted
                            still = _bytes_split([os.fspath(reuse.pool_dir(self.root, p)) for p in kept], set())[0]
                            freed += max(0, kept_bytes - still)
                            kept_bytes = still
                        reuse.forget(self.db, self.root, reusable - set(kept))
                        reuse.after_gc(self.db, kept)
                    except OSError as error:
                        raise _store_error(error, "garbage collection failed") from error
            finally:
                for path, lock in held.items():
                    if dry_run:
                        lock.release()
                    else:
                        lock.release_and_delete()
        return GCResult(deleted=sorted(dead + junk), bytes_freed=freed, dry_run=dry_run, kept_aside=tuple(sorted(kept)),
                        bytes_kept_aside=kept_bytes, pool_freed=tuple(pool_freed), roots=kept_by,
                        temp_rooted=len(temp))

    def _unregistered_entries(self, valid: set[str]) -> list[str]:
        junk = []
        for entry in sorted(os.listdir(self.root)):
            path = os.path.join(self.store_dir, entry)
            if entry.startswith(".") or path in valid:
                continue
            lock = PathLock(lock_file_for(self.locks_dir, path))
            if lock.acquire(blocking=False):  # unlocked: no add_path is installing it
                lock.release()
                junk.append(path)
        return junk


def _stale_link(link: str) -> bool:
    """Whether the indirect root ``link`` (not a valid root now) may have its `auto` entry removed:
    it is gone, or it is there and names no valid store path (True).

    Raises StoreError when it cannot be looked at (EACCES on a directory above it, EIO): Nix
    skips such a root and collects what it kept (src/libstore/gc.cc, findRoots: "cannot read
    potential root"); here the gc stops instead, naming the link, so a result nobody could read
    for a moment is not deleted."""
    try:
        os.lstat(link)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError as error:
        raise StoreError(f"cannot look at the GC root {link} ({error.strerror}); not collecting garbage: "
                         f"fix its permissions or remove it") from error
    return True


def _bytes_split(paths: list[str], kept: set[str]) -> tuple[int, int]:
    """Bytes that taking every tree in `paths` out of the store frees: (now, when the `kept` ones go too).

    A file counts when all its links lie in `paths`: a file hard-linked from a path that
    stays (nvcc's nvvm/ shares libnvvm's inodes, as Nix's store optimisation does) frees
    nothing; one linked twice inside `paths` counts once. It counts as freed now unless one
    of its links is in a `kept` tree (moved aside whole, `reuse.keep`), else as freed by the
    gc that deletes those. Nix counts a file when its link count is 1 (or 2, its .links
    entry), src/libstore/gc.cc.
    """
    now = later = 0
    links: dict[tuple[int, int], int] = {}
    in_kept: set[tuple[int, int]] = set()
    for path in paths:
        aside = path in kept
        try:
            for _, st in nar.walk(path):
                if stat.S_ISDIR(st.st_mode):
                    continue
                key = (st.st_dev, st.st_ino)
                seen = links.get(key, 0) + 1
                links[key] = seen
                if aside:
                    in_kept.add(key)
                if seen == st.st_nlink:  # the last link of this inode is among the deleted
                    if key in in_kept:
                        later += st.st_size
                    else:
                        now += st.st_size
        except FileNotFoundError:
            pass
    return now, later


@contextmanager
def _held(lock: PathLock) -> Iterator[PathLock]:
    """A lock already taken (`acquire_saying_so`), released at the end of the block."""
    try:
        yield lock
    finally:
        lock.release()
