"""The store: valid paths on disk plus their metadata, added crash-safely.

Layout of a store root `<store>`:

    <store>/<hash>-<name>     store paths (read-only once registered)
    <store>/.meta/db.sqlite   metadata (see `db.py`)
    <store>/.locks/           one lock file per store path, plus gc.lock
    <store>/.tmp/             build directories, each guarded by its own lock
    <store>/.gcroots/         GC roots: symlinks to store paths; auto/ holds
                              indirect roots (symlinks to `-o result` links)

A path is valid exactly when the database says so; it is registered only
after its contents are complete and moved into place, so a crash at any
moment leaves either a valid path or none.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import sqlite3
import stat
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..confine import unshare_file
from ..errors import StoreError
from . import nar
from .db import PathInfo, StoreDB
from .graph import StoreGraph
from .locks import PathLock, acquire_saying_so, lock_file_for
from .paths import base32_encode, compress_hash, hash_part, is_hash_part, make_store_path_from_digest, to_store_path

__all__ = ["GCResult", "Hop", "PathInfo", "Problem", "Store", "default_store_root"]

_WRITE_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded", errno.EACCES: "permission denied", errno.EPERM: "operation not permitted", errno.EROFS: "read-only file system"}


def default_store_root() -> Path:
    """`CUDAPKGS_STORE`, else `$XDG_DATA_HOME/cudapkgs/store` (~/.local/share/cudapkgs/store)."""
    env = os.environ.get("CUDAPKGS_STORE")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "cudapkgs" / "store"


@dataclass(frozen=True)
class GCResult:
    """What a garbage collection deleted (or would delete, in a dry run)."""

    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    dry_run: bool = False


@dataclass(frozen=True)
class Problem:
    """One inconsistency `Store.verify` found; kind is missing, hash-mismatch, invalid-reference or missing-reference."""

    path: str
    kind: str
    message: str


@dataclass(frozen=True)
class Hop:
    """One step of a why-depends chain: `referrer` refers to `reference` from `files` (relative; '' is the path itself)."""

    referrer: str
    reference: str
    files: tuple[str, ...]


class Store:
    """A store rooted at `root`; use `Store.open`."""

    def __init__(self, root: Path, db: StoreDB) -> None:
        self.root = root
        self.store_dir = os.fspath(root)
        self.db = db
        self.locks_dir = root / ".locks"
        self.tmp_dir = root / ".tmp"
        self.gcroots_dir = root / ".gcroots"
        self._temp_roots: tuple[PathLock, Path] | None = None

    # -- opening ---------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Store:
        """Open (creating on demand) the store at `root`, `CUDAPKGS_STORE` or the XDG default.

        Modes are explicit, whatever the umask: directories 0755, the database 0644.  A
        store whose root, ``.meta`` or database others can write (group or world write
        bit) is refused: another user could replace paths and their metadata alike.
        With `read_only`, nothing is created and the database is opened read-only, so a
        user who cannot write the store can still query it (path-info, why-depends,
        verify --no-contents).  Raises `StoreError`.
        """
        path = Path(os.path.abspath(os.path.expanduser(os.fspath(root)))) if root is not None else Path(os.path.abspath(default_store_root()))
        path = Path(os.path.normpath(path))
        db_file = path / ".meta" / "db.sqlite"
        try:
            if read_only:
                if not db_file.is_file():
                    raise StoreError(f"there is no store at {path} (no {db_file})")
            else:
                for sub in ("", ".meta", ".locks", ".tmp", ".gcroots", ".gcroots/auto", ".gcroots/profiles", ".temproots", ".logs"):
                    directory = path / sub
                    if not directory.is_dir():
                        directory.mkdir(parents=True, exist_ok=True)
                        os.chmod(directory, 0o755)  # not what the umask says
                spread_subdirectories(path / ".tmp")
            _refuse_writable_by_others(path, db_file)
            if not read_only and not (os.access(path, os.W_OK) and os.access(path / ".meta", os.W_OK)):
                owner = os.stat(path).st_uid
                raise StoreError(
                    f"cannot write the store {path}: permission denied (it belongs to uid {owner}); "
                    "queries (path-info, why-depends, verify) still work"
                )
            created = not db_file.exists()
            db = StoreDB(db_file, read_only=read_only)
            if created:
                os.chmod(db_file, 0o644)
        except OSError as error:
            raise _store_error(error, f"cannot open the store {path}") from error
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the store database in {path}: {error}") from error
        return cls(path, db)

    def close(self) -> None:
        if self._temp_roots is not None:
            lock, file = self._temp_roots
            file.unlink(missing_ok=True)
            lock.release_and_delete()
            self._temp_roots = None
        self.db.close()

    def add_temp_roots(self, paths: Iterable[str]) -> None:
        """Keep `paths` alive until this Store is closed or the process ends (Nix's temproots).

        A build's outputs are valid before its caller links them as `result`; a gc in
        between must not collect them. The roots live in `<store>/.temproots/<pid>-…`,
        locked by this process; gc honours the files whose lock is held and deletes the rest.
        """
        paths = [self.parse(p) for p in paths]
        if self._temp_roots is None:
            file = self.root / ".temproots" / f"{os.getpid()}-{uuid.uuid4().hex}"
            lock = PathLock(file.with_name(file.name + ".lock"))
            lock.acquire()
            self._temp_roots = (lock, file)
        with open(self._temp_roots[1], "a") as f:
            f.write("".join(p + "\n" for p in paths))

    def protect(self, paths: Iterable[str]) -> list[str]:
        """Make the valid ones among `paths` temporary roots (`add_temp_roots`) atomically w.r.t. gc.

        The gc lock is held shared meanwhile, so a gc that has not started yet will see
        the roots and one that is running finishes first; a path valid when this returns
        stays valid until the Store is closed.  Returns the paths rooted.
        """
        inside = self.store_dir + "/"
        wanted = sorted({p for p in paths if isinstance(p, str) and p.startswith(inside)})
        try:
            with self._gc_shared():
                invalid = set(self.db.invalid_paths(wanted))  # one query
                valid = [p for p in wanted if p not in invalid]
                if valid:
                    self.add_temp_roots(valid)
        except OSError as error:
            if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return []  # a user who cannot write the store cannot build either (a dry run still plans)
            raise
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- paths and queries -----------------------------------------------

    def parse(self, path: str | os.PathLike[str]) -> str:
        """Normalise a store path (or a path inside one, or a symlink such as ./result to one)."""
        text = os.path.abspath(os.fspath(path))
        seen = 0
        prefix = self.store_dir + "/"
        # Follow links such as ./result or .gcroots entries, but not a store path that is itself a symlink.
        while not (text.startswith(prefix) and not text[len(prefix):].startswith(".")) and os.path.islink(text) and seen < 40:
            text = os.path.normpath(os.path.join(os.path.dirname(text), os.readlink(text)))
            seen += 1
        if not text.startswith(prefix) and not os.path.lexists(text) and not is_hash_part(os.path.basename(text)[:32]):
            # ./result before any build, or a typo: not a store path of another store either
            raise StoreError(f"path '{os.fspath(path)}' does not exist (expected a store path, a file in one, "
                             "or a link to one such as ./result from `cudapkgs build`)")
        return to_store_path(self.store_dir, text)

    def is_valid(self, path: str) -> bool:
        """Whether `path` is a registered (complete) store path."""
        return self.db.is_valid(os.path.normpath(path))

    def query(self, path: str) -> PathInfo:
        """The metadata of a valid path; StoreError if it is not in the store or not valid."""
        store_path = self.parse(path)
        info = self.db.query(store_path)
        if info is None:
            raise StoreError(f"path '{store_path}' is not valid in the store {self.store_dir}")
        return info

    def references(self, path: str) -> list[str]:
        """The paths `path` refers to."""
        return list(self.query(path).references)

    def referrers(self, path: str) -> list[str]:
        """The valid paths that refer to `path`."""
        return self.db.referrers(self.parse(path))

    def closure(self, paths: Iterable[str]) -> set[str]:
        """Every path reachable from `paths` through references, `paths` included."""
        todo = deque(self.query(p).path for p in paths)
        seen = set(todo)
        while todo:
            for ref in self.db.references(todo.popleft()):
                if ref not in seen:
                    seen.add(ref)
                    todo.append(ref)
        return seen

    def closure_size(self, paths: Iterable[str]) -> int:
        """The sum of the NAR sizes of `paths`' closure."""
        return sum(self.query(p).nar_size for p in self.closure(paths))

    def graph(self) -> StoreGraph:
        """Every valid path and reference, read in one pass (see `graph.py`), for commands over many paths."""
        try:
            return StoreGraph.load(self.db)
        except sqlite3.Error as error:
            raise StoreError(f"cannot read the store database in {self.store_dir}: {error}") from error

    def all_paths(self) -> list[str]:
        """Every valid path, sorted."""
        return self.db.all_paths()

    # -- adding ----------------------------------------------------------

    def add_path(
        self,
        name_or_path: str,
        build: Callable[[Path], None],
        *,
        references_candidates: Iterable[str] = (),
        deriver: str | None = None,
    ) -> str:
        """Make a store path valid by running `build(out)` at most once, crash-safely.

        `name_or_path` is either a full store path (input-addressed: its hash is
        known up front, e.g. from a derivation) or a bare name, in which case
        the path is content-addressed from the NAR hash of what `build` made and
        the references found.  `build` must create `out` (a file, directory or
        symlink).  References are the `references_candidates` (and the path
        itself) whose hash parts occur in the result.
        """
        candidates = {hash_part(c): self.parse(c) for c in references_candidates}
        try:
            if "/" in name_or_path:
                return self._add_addressed(self.parse(name_or_path), build, candidates, deriver)
            return self._add_content_addressed(name_or_path, build, candidates, deriver)
        except OSError as error:
            raise _store_error(error, f"cannot add '{name_or_path}' to the store {self.store_dir}") from error
        except sqlite3.OperationalError as error:
            raise StoreError(f"cannot register '{name_or_path}' in the store {self.store_dir}: {error}") from error

    def _add_addressed(self, path: str, build: Callable[[Path], None], candidates: dict[str, str], deriver: str | None) -> str:
        if self.db.is_valid(path):
            return path
        with self._gc_shared(), PathLock(lock_file_for(self.locks_dir, path)):
            if self.db.is_valid(path):  # another process built it while we waited
                return path
            self._clean_tmp()
            with self._tmp_build() as tmp:
                out = tmp / "out"
                build(out)
                refs, digest, size = self._inspect(out, {**candidates, hash_part(path): path}, path)
                self._install(out, path, nar.format_hash(digest), size, refs, deriver)
        return path

    def add_outputs(
        self,
        paths: Sequence[str],
        build: Callable[[dict[str, Path]], None],
        *,
        references_candidates: Iterable[str] = (),
        deriver: str | None = None,
        links: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Make several paths (a derivation's outputs) valid together, crash-safely.

        `build(dirs)` gets a temporary directory per path (keyed by store path) and must
        create each one. The outputs may refer to one another; they are registered in
        one transaction, so either all of them become valid or none does. Paths that
        another process made valid meanwhile are not rebuilt.

        `links` (filled by `build`, read after it): files of the outputs that the builder
        hard-linked to files of valid store paths (file in a temporary directory -> store
        file), as Nix's store optimisation links identical files. Each is checked (`_store_links`:
        the same inode, the store file inside a valid path and already read-only with mtime 1)
        and kept as a link; any other hard-linked file gets its own copy, as always.
        """
        wanted = [self.parse(p) for p in paths]
        candidates = {hash_part(c): self.parse(c) for c in references_candidates}
        candidates.update({hash_part(p): p for p in wanted})
        try:
            if not self.db.invalid_paths(wanted):
                return wanted
            with self._gc_shared(), contextlib.ExitStack() as locks:
                for path in sorted(wanted):  # a fixed order: no deadlock between two builders
                    lock = acquire_saying_so(PathLock(lock_file_for(self.locks_dir, path)), path)
                    locks.callback(lock.release)
                if not self.db.invalid_paths(wanted):
                    return wanted
                self._clean_tmp()
                with self._tmp_build() as tmp:
                    dirs = {path: tmp / f"out{i}" for i, path in enumerate(wanted)}
                    build(dirs)
                    entries = []
                    for path, out in dirs.items():
                        if not os.path.lexists(out):
                            raise StoreError(f"the builder of '{path}' did not create its output")
                    for path, (digest, size, found) in zip(dirs, _hash_and_scan_all(list(dirs.values()), candidates)):
                        refs = {candidates[h] for h in found}
                        for ref in refs:
                            if ref not in dirs and not self.db.is_valid(ref):
                                raise StoreError(f"'{path}' refers to '{ref}', which is not valid in the store {self.store_dir}")
                        entries.append((path, nar.format_hash(digest), size, refs, deriver))
                    # An output already valid (substituted from a cache, say) stays as it is: replacing
                    # it would take away files that valid paths may refer to.
                    keep = {path for path in dirs if self.db.is_valid(path)}
                    entries = [entry for entry in entries if entry[0] not in keep]
                    moved = []
                    try:
                        for path, out in dirs.items():
                            if path in keep:
                                continue
                            if os.path.lexists(path):  # left behind by a crash before registration
                                _remove_tree(path)
                            _make_read_only(out, keep_root_writable=True, keep=self._store_links(links or {}, out))
                            os.rename(out, path)
                            moved.append(path)
                            if os.path.isdir(path) and not os.path.islink(path):
                                _freeze(path)
                        self.db.register_many(entries)
                    except BaseException:
                        for path in moved:
                            _remove_tree(path)
                        raise
            return wanted
        except OSError as error:
            raise _store_error(error, f"cannot add {', '.join(paths)} to the store {self.store_dir}") from error
        except sqlite3.OperationalError as error:
            raise StoreError(f"cannot register outputs in the store {self.store_dir}: {error}") from error

    def _store_links(self, links: Mapping[str, str], root: str | os.PathLike[str]) -> frozenset[str]:
        """The files of `links` below `root` that are hard links to read-only files of valid store paths.

        A file qualifies when it and its store file are the same inode (device and number),
        the store file's path has no symlink in it, lies in a path valid in this store, and the
        inode is already as the store leaves files (mode 0444 or 0555, mtime 1): then keeping the
        link changes nothing outside, and nothing can change it that cannot change the store.
        """
        inside = self.store_dir.rstrip("/") + "/"
        base = os.path.abspath(root) + "/"
        keep = set()
        for new, target in links.items():
            if not new.startswith(base) or not target.startswith(inside):
                continue
            try:
                mine, theirs = os.lstat(new), os.lstat(target)
            except OSError:
                continue
            if (not stat.S_ISREG(mine.st_mode) or (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino)
                    or stat.S_IMODE(mine.st_mode) not in (0o444, 0o555) or mine.st_mtime != 1):
                continue
            if os.path.realpath(target) != os.path.normpath(target):
                continue
            top = inside + target[len(inside):].split("/", 1)[0]
            if self.db.is_valid(top):
                keep.add(os.path.join(os.fspath(root), new[len(base):]))  # as _make_read_only names it
        return frozenset(keep)

    def add_verified_path(
        self,
        path: str,
        fill: Callable[[Path], None],
        *,
        nar_hash: str,
        nar_size: int,
        references: Iterable[str],
        deriver: str | None = None,
        before_register: Callable[[], None] | None = None,
    ) -> bool:
        """Make `path` valid from `fill(out)`, whose NAR the caller checks against `nar_hash` while filling.

        For substitution: `fill` unpacks a NAR into `out` and raises unless what it
        read hashes to `nar_hash`/`nar_size`, so the tree is not read a second time.
        `references` (store paths) must all be valid already (or be `path`). The path
        is registered only after `fill` returns; any error leaves the store unchanged.
        Returns False if `path` was already valid (then `fill` is not called).
        With `before_register` (e.g. waiting until the references are registered by
        other threads), the references are checked after it returns instead of
        before `fill`, so unpacking need not wait for them.
        """
        path = self.parse(path)
        refs = {self.parse(r) for r in references}

        def check_references() -> None:
            absent = [r for r in sorted(refs) if r != path and not self.db.is_valid(r)]
            if absent:
                raise StoreError(f"'{path}' refers to '{absent[0]}', which is not valid in the store {self.store_dir}")

        try:
            if self.db.is_valid(path):
                return False
            if before_register is None:
                check_references()
            with self._gc_shared(), PathLock(lock_file_for(self.locks_dir, path)):
                if self.db.is_valid(path):
                    return False
                self._clean_tmp()
                with self._tmp_build() as tmp:
                    out = tmp / "out"
                    fill(out)
                    if not os.path.lexists(out):
                        raise StoreError(f"nothing was unpacked for '{path}'")
                    if before_register is not None:
                        before_register()
                        check_references()
                    self._move_in_and_register(out, path, nar_hash, nar_size, refs, deriver)
            return True
        except OSError as error:
            raise _store_error(error, f"cannot add '{path}' to the store {self.store_dir}") from error
        except sqlite3.OperationalError as error:
            raise StoreError(f"cannot register '{path}' in the store {self.store_dir}: {error}") from error

    def _add_content_addressed(self, name: str, build: Callable[[Path], None], candidates: dict[str, str], deriver: str | None) -> str:
        with self._gc_shared():
            self._clean_tmp()
            with self._tmp_build() as tmp:
                out = tmp / "out"
                build(out)
                refs, digest, size = self._inspect(out, candidates, name)
                kind = "source" + "".join(":" + r for r in sorted(refs))
                path = make_store_path_from_digest(self.store_dir, kind, digest.hex(), name)
                with PathLock(lock_file_for(self.locks_dir, path)):
                    if not self.db.is_valid(path):
                        self._install(out, path, nar.format_hash(digest), size, refs, deriver)
        return path

    def _inspect(self, out: Path, candidates: dict[str, str], what: str) -> tuple[set[str], bytes, int]:
        if not os.path.lexists(out):
            raise StoreError(f"the builder of '{what}' did not create its output {out}")
        digest, size, found = nar.hash_and_scan(out, candidates)  # one read of each file
        refs = {candidates[h] for h in found}
        for ref in refs:
            if ref != what and not self.db.is_valid(ref):
                raise StoreError(f"'{what}' refers to '{ref}', which is not valid in the store {self.store_dir}")
        return refs, digest, size

    def _install(self, out: Path, path: str, nar_hash: str, size: int, refs: set[str], deriver: str | None) -> None:
        # Called with the path's lock held and the path not valid.
        _make_read_only(out, keep_root_writable=True)
        self._move_in_and_register(out, path, nar_hash, size, refs, deriver)

    def _move_in_and_register(self, out: Path, path: str, nar_hash: str, size: int, refs: Iterable[str],
                              deriver: str | None) -> None:
        """Rename a finished tree `out` to `path` and register it; nothing is left at `path` if that fails.

        Called with the path's lock held and the path not valid.
        """
        if os.path.lexists(path):  # left behind by a crash between rename and registration
            _remove_tree(path)
        os.rename(out, path)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                _freeze(path)
            self.db.register(path, nar_hash, size, refs, deriver)
        except BaseException:
            _remove_tree(path)
            raise

    @contextmanager
    def work_dir(self, label: str = "build") -> Iterator[Path]:
        """A new private directory ``<store>/.tmp/work-<label>-<uuid>`` for a build's scratch files.

        It is locked while the block runs and removed afterwards; if the process is
        killed, the lock dies with it and the next build or gc removes the directory
        (`_clean_tmp`).  A caller that wants to keep it moves it away inside the block.
        """
        safe = "".join(c if c.isalnum() or c in "+-._" else "_" for c in label)[:100]
        with self._locked_tmp(f"work-{safe}-{uuid.uuid4().hex}") as path:
            yield path

    @contextmanager
    def _tmp_build(self) -> Iterator[Path]:
        """A private directory ``<store>/.tmp/<uuid>`` where outputs are built before they are registered."""
        with self._locked_tmp(uuid.uuid4().hex) as path:
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

    @contextmanager
    def _gc_shared(self) -> Iterator[None]:
        # A running `cudapkgs gc` holds it exclusively: a build waiting here says so (locks.wait_notice).
        lock = acquire_saying_so(PathLock(self.locks_dir / "gc.lock", shared=True),
                                 f"the store {self.store_dir} (a garbage collection of it is running)")
        try:
            yield
        finally:
            lock.release()

    # -- roots -----------------------------------------------------------

    def add_root(self, name: str, store_path: str) -> Path:
        """A direct GC root `<store>/.gcroots/profiles/<name>` pointing at `store_path`."""
        target = self.query(store_path).path
        link = self.gcroots_dir / "profiles" / name
        if "/" in name or name.startswith("."):
            raise StoreError(f"invalid GC root name {name!r}")
        _replace_symlink(link, target)
        return link

    def add_indirect_root(self, link_path: str | os.PathLike[str], store_path: str) -> Path:
        """Make `link_path` (e.g. ./result) a symlink to `store_path` and register it as a GC root.

        The root lives as long as `link_path` exists and points into the store.
        """
        target = self.query(store_path).path
        link = Path(os.path.abspath(link_path))
        if os.path.lexists(link) and not os.path.islink(link):
            raise StoreError(f"'{link}' exists and is not a symlink; not replacing it")
        try:
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
                if not os.path.islink(link):
                    continue
                target = os.path.join(dirpath, os.readlink(link))
                if dirpath == auto_dir:
                    store_path = self._root_target(target, graph)
                    if store_path is None:
                        if remove_stale:
                            os.unlink(link)
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
        except StoreError:
            return None
        valid = graph.is_valid(store_path) if graph is not None else self.db.is_valid(store_path)
        return store_path if valid else None

    # -- garbage collection ----------------------------------------------

    def gc(self, dry_run: bool = False) -> GCResult:
        """Delete every path outside the closure of the GC roots (and stale roots, and leftovers)."""
        with _held(acquire_saying_so(PathLock(self.locks_dir / "gc.lock"),
                                     f"the store {self.store_dir} for a garbage collection (builds or another gc are using it)")):
            if not dry_run:
                self._clean_tmp()  # work and build directories of killed builds
            graph = self.graph()  # one pass over the database; gc.lock keeps it current
            roots = set(self.roots(remove_stale=not dry_run, graph=graph).values()) | self._live_temp_roots(not dry_run, graph)
            live = graph.closure(roots)
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
                freed = _bytes_freed(dead + junk)
                if not dry_run:
                    try:
                        self.db.invalidate(dead)  # forget first: a crash now leaves only unregistered junk
                        for path in dead + junk:
                            _remove_tree(path)
                    except OSError as error:
                        raise _store_error(error, "garbage collection failed") from error
            finally:
                for path, lock in held.items():
                    if dry_run:
                        lock.release()
                    else:
                        lock.release_and_delete()
        return GCResult(deleted=sorted(dead + junk), bytes_freed=freed, dry_run=dry_run)

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

    # -- verification and explanation -------------------------------------

    def verify(self, check_contents: bool = True, paths: Iterable[str] | None = None,
               progress: Callable[[int, int, int, int], None] | None = None) -> list[Problem]:
        """Check valid paths: each exists, refers only to valid paths and (with `check_contents`) matches its
        NAR hash and records every valid path its files mention (kind ``missing-reference``).

        `paths`: only these (store paths, files inside them or links to them, as `query` takes);
        default every valid path. Raises `StoreError` for a path that is not valid. The database
        is read once, and the valid paths' hash parts are encoded once for every path scanned, so
        the time grows linearly with the paths (and bytes) checked.

        `progress(paths_done, paths_total, bytes_done, bytes_total)` is called before each path
        and once at the end; bytes are the registered NAR sizes (what hashing reads).
        """
        problems = []
        graph = self.graph()  # one pass over the database, not two queries per path
        todo = sorted(graph.rows) if paths is None else sorted({self._valid_path_of(p, graph) for p in paths})
        hashes: dict[str, str] | None = None
        candidates: nar.Candidates | None = None
        bytes_total = sum(graph.rows[p][1] for p in todo)
        bytes_done = 0
        for done, path in enumerate(todo):
            if progress is not None:
                progress(done, len(todo), bytes_done, bytes_total)
            info = graph.info(path)
            bytes_done += info.nar_size
            if not os.path.lexists(path):
                problems.append(Problem(path, "missing", f"path '{path}' is registered but missing on disk"))
                continue
            if check_contents:
                if hashes is None:
                    hashes = {hash_part(p): p for p in graph.rows}
                    candidates = nar.Candidates(hashes)
                assert candidates is not None
                try:
                    # One read: the NAR hash, and every valid path the contents mention.
                    digest, size, found = nar.hash_and_scan(path, candidates)
                except (OSError, ValueError) as error:
                    problems.append(Problem(path, "hash-mismatch", f"path '{path}' cannot be read: {error}"))
                else:
                    actual = nar.format_hash(digest)
                    if actual != info.nar_hash:
                        problems.append(Problem(path, "hash-mismatch", f"path '{path}' was modified: expected hash {info.nar_hash}, got {actual}"))
                    else:
                        # A recorded reference list that misses a path the contents mention would let gc
                        # delete a dependency (e.g. an import that trusted its archive's list).
                        mentioned = {hashes[h] for h in found}
                        for ref in sorted(mentioned - set(info.references)):
                            problems.append(Problem(path, "missing-reference", f"path '{path}' mentions '{ref}', which is not among its recorded references"))
            for ref in info.references:
                if not graph.is_valid(ref):
                    problems.append(Problem(path, "invalid-reference", f"path '{path}' refers to '{ref}', which is not valid"))
        if progress is not None:
            progress(len(todo), len(todo), bytes_done, bytes_total)
        return problems

    def _valid_path_of(self, given: str, graph: StoreGraph) -> str:
        """The valid store path `given` names (a store path, a file inside one, a link to one); StoreError if none."""
        path = self.parse(given)
        if not graph.is_valid(path):
            raise StoreError(f"path '{path}' is not valid in the store {self.store_dir}")
        return path

    def why_depends(self, a: str, b: str) -> list[list[Hop]]:
        """Chains of references from `a` to `b`: one shortest chain through each direct reference of `a` that leads to `b`.

        Each hop names the files of its referrer that hold the reference's hash.
        Empty when `a` does not depend on `b`.
        """
        a, b = self.query(a).path, self.query(b).path
        reaches_b = {b}  # paths with b in their closure
        todo = deque([b])
        while todo:
            for referrer in self.db.referrers(todo.popleft()):
                if referrer not in reaches_b:
                    reaches_b.add(referrer)
                    todo.append(referrer)
        if a not in reaches_b or a == b:
            return []
        chains = []
        for first in self.db.references(a):
            if first not in reaches_b or first == a:
                continue
            nodes = [a] + self._shortest(first, b, reaches_b)
            chains.append([Hop(x, y, self._files_referring(x, y)) for x, y in zip(nodes, nodes[1:])])
        return chains

    def _shortest(self, start: str, goal: str, allowed: set[str]) -> list[str]:
        parent: dict[str, str | None] = {start: None}
        todo = deque([start])
        while todo:
            node = todo.popleft()
            if node == goal:
                break
            for ref in self.db.references(node):
                if ref in allowed and ref not in parent:
                    parent[ref] = node
                    todo.append(ref)
        chain = [goal]
        while (prev := parent[chain[-1]]) is not None:
            chain.append(prev)
        return chain[::-1]

    def _files_referring(self, referrer: str, reference: str) -> tuple[str, ...]:
        files: list[str] = []
        nar.scan_for_hashes(referrer, [hash_part(reference)], on_found=lambda _h, rel: files.append(rel))
        return tuple(sorted(files))


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


def _hash_and_scan_all(outs: list[Path], candidates: dict[str, str]) -> list[tuple[bytes, int, set[str]]]:
    """`nar.hash_and_scan` of each output, the outputs side by side on two threads.

    Hashing and reading release the GIL, so a derivation's outputs (bin, lib, dev, …)
    are read and hashed in parallel; each result is the same as a sequential pass.
    """
    if len(outs) < 2 or (os.cpu_count() or 1) < 2:
        return [nar.hash_and_scan(out, candidates) for out in outs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="cudapkgs-nar") as pool:
        return list(pool.map(lambda out: nar.hash_and_scan(out, candidates), outs))


def _refuse_writable_by_others(root: Path, db_file: Path) -> None:
    """StoreError if the store root, its .meta directory or its database is group- or world-writable."""
    for target in (root, root / ".meta", db_file):
        try:
            st = os.stat(target)
        except FileNotFoundError:
            continue
        if st.st_mode & 0o022:
            raise StoreError(
                f"refusing to use the store {root}: {target} is writable by other users "
                f"(mode {stat.S_IMODE(st.st_mode):04o}), who could replace store paths and their metadata; "
                f"fix it with: chmod go-w {target}"
            )


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


@contextmanager
def _held(lock: PathLock) -> Iterator[PathLock]:
    """A lock already taken (`acquire_saying_so`), released at the end of the block."""
    try:
        yield lock
    finally:
        lock.release()


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
    shutil.rmtree(path)


def _bytes_freed(paths: list[str]) -> int:
    """Bytes that deleting every tree in `paths` frees: the sizes of the files whose links all lie in them.

    A file hard-linked from a path that stays (nvcc's nvvm/ shares libnvvm's inodes, as
    Nix's store optimisation does) frees nothing; one linked twice inside `paths` counts once.
    Nix counts a file when its link count is 1 (or 2, its .links entry), src/libstore/gc.cc.
    """
    total = 0
    links: dict[tuple[int, int], int] = {}
    for path in paths:
        try:
            for _, st in nar.walk(path):
                if stat.S_ISDIR(st.st_mode):
                    continue
                key = (st.st_dev, st.st_ino)
                seen = links.get(key, 0) + 1
                links[key] = seen
                if seen == st.st_nlink:  # the last link of this inode is among the deleted
                    total += st.st_size
        except FileNotFoundError:
            pass
    return total


def _replace_symlink(link: str | os.PathLike[str], target: str) -> None:
    tmp = f"{os.fspath(link)}.tmp-{uuid.uuid4().hex}"
    os.symlink(target, tmp)
    os.replace(tmp, link)
