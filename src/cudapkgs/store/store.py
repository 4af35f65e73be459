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

The `Store` class is made of parts, one concern each: opening and queries here,
`registration` (adding paths), `workdirs` (scratch directories), `gc` (roots and garbage
collection) and `verify` (checks and why-depends).  Import `Store` and the result types from
this module.
"""

from __future__ import annotations

import os
import sys
import sqlite3
import stat
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from ..errors import StoreError, shell_word
from ..owners import foreign_directory_above
from ..path_links import foreign_link
from ..users import user_name
from .db import PathInfo, StoreDB
from .files import _store_error
from .gc import GarbageCollector, GCResult
from .graph import StoreGraph
from .locks import PathLock
from .paths import is_hash_part, to_store_path
from .registration import Registration
from .verify import Hop, Problem, Verification
from .workdirs import WorkDirs, spread_subdirectories

__all__ = ["GCResult", "Hop", "PathInfo", "Problem", "Store", "default_store_root", "parse_store_path", "spread_subdirectories"]


def default_store_root() -> Path:
    """`CUDAPKGS_STORE`, else `$XDG_DATA_HOME/cudapkgs/store` (~/.local/share/cudapkgs/store).

    Raises `ConfigError` when $CUDAPKGS_STORE is a relative path (`xdg.env_path`) or there is no home."""
    from ..xdg import env_path, required_dir  # a relative XDG value, or a relative HOME, is ignored

    named = env_path("CUDAPKGS_STORE")  # a relative one is refused: it would be the working directory's
    if named:
        return Path(named)

    return Path(required_dir("XDG_DATA_HOME")) / "cudapkgs" / "store"


class Store(Registration, WorkDirs, GarbageCollector, Verification):
    """A store rooted at `root`; use `Store.open`."""

    def __init__(self, root: Path, db: StoreDB) -> None:
        self.root = root
        self.discarded: list[str] = []  # paths found damaged after a crash when this Store opened (unsynced.py)
        self.store_dir = os.fspath(root)
        self.db = db
        self.locks_dir = root / ".locks"
        self.tmp_dir = root / ".tmp"
        self.gcroots_dir = root / ".gcroots"
        self._temp_roots: tuple[PathLock, Path] | None = None
        self._rooted: set[str] = set()
        self._gc_shared_depth = 0

    # -- opening ---------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> Store:
        """Open (creating on demand) the store at `root`, `CUDAPKGS_STORE` or the XDG default.

        Modes are explicit, whatever the umask: directories 0755, the database 0644.  A
        store whose root, ``.meta`` or database others can write (group or world write
        bit) is refused, before anything is created in it: another user could replace paths
        and their metadata alike; so is one that, or a directory above which, belongs to another
        user than the current one or root (`_refuse_owned_by_others`).
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
                # Refuse before creating anything: a root others can write (Debian's /nix/store is
                # root:nixbld 1775) or cannot be written must not be left holding .locks/.gcroots/...
                _refuse_writable_by_others(path, db_file)
                if path.is_dir() and not (os.access(path, os.W_OK) and (not (path / ".meta").is_dir()
                                                                         or os.access(path / ".meta", os.W_OK))):
                    raise StoreError(
                        f"cannot write the store {path}: permission denied (it belongs to uid {os.stat(path).st_uid}); "
                        "queries (path-info, why-depends, verify) still work"
                    )
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
        store = cls(path, db)
        if not read_only:
            # Paths substituted in a boot that ended in a crash are hashed again (unsynced.py).
            from .unsynced import check_earlier_boots

            try:
                store.discarded = check_earlier_boots(store, warn=lambda line: print(line, file=sys.stderr))
            except (OSError, sqlite3.Error) as error:
                store.close()
                raise StoreError(f"cannot check the paths substituted before the last reboot in {path}: {error}") from error
        return store

    def close(self) -> None:
        """Release this Store's temporary roots and close its database."""
        self.release_temp_roots()
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- paths and queries -----------------------------------------------

    def parse(self, path: str | os.PathLike[str]) -> str:
        """Normalise a store path (or a path inside one, or a symlink such as ./result to one): `parse_store_path`."""
        return parse_store_path(self.store_dir, path)

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


def check_owners(root: str | os.PathLike[str]) -> None:
    """Raise `StoreError` (the message `Store.open` gives) when the store at `root` could not be opened for
    its owners or modes: it, its ``.meta`` or database, or a directory above it belongs to another user or
    is writable by others (`_refuse_owned_by_others`, `_refuse_writable_by_others`). Reads only modes."""
    path = Path(os.path.normpath(os.path.abspath(os.fspath(root))))
    _refuse_writable_by_others(path, path / ".meta" / "db.sqlite")


def _refuse_owned_by_others(root: Path) -> None:
    """StoreError unless the store root, its ``.meta``, its database and every directory above the root
    (as written and as resolved) belong to the current user or root, and no directory above it is
    writable by others without the sticky bit (``/tmp`` is 1777: fine).

    Whoever owns one of them can replace store paths: the owner of a store changes its modes and
    files at will, the owner of a directory above it renames the store away and puts another in its
    place. Nix refuses a store directory with insecure permissions or reached through a link owned by
    someone else in the same spirit (src/libstore/local-store.cc, ``LocalStore::LocalStore``: "the path
    '…' is a symlink; this is not allowed for the Nix store and its parent directories").
    A user may read (``read_only``) a store that root owns, as every user uses root's /nix/store.
    A symbolic link on the way (the root, a directory above it, or one inside a link's target) must
    belong to the current user or root too: its owner points it elsewhere at will (`cudapkgs.path_links`).
    """
    me = os.geteuid()
    trusted = {me, 0}
    foreign = foreign_link(root / ".meta" / "db.sqlite", trusted)  # the root's, its parents', every link's on the way
    if foreign is not None:
        raise StoreError(
            f"refusing to use the store {root}: it is reached through the link {foreign[0]}, which belongs to "
            f"{user_name(foreign[1])}, who could point it at another store at any moment; use a path without "
            "that link (storeDir, CUDAPKGS_STORE)")
    for target in (root, root / ".meta", root / ".meta" / "db.sqlite"):
        try:
            st = os.stat(target)
        except FileNotFoundError:
            continue
        if st.st_uid not in trusted:
            raise StoreError(
                f"refusing to use the store {root}: {target} belongs to {user_name(st.st_uid)}, not to you "
                f"({user_name(me)}){'' if me == 0 else ' or root'}, and its owner could replace store paths and "
                "their metadata; use a store of your own (storeDir, CUDAPKGS_STORE)")
    above = foreign_directory_above(root, trusted)
    if above is None:
        return
    directory, st = above
    if st.st_uid not in trusted:
        raise StoreError(
            f"refusing to use the store {root}: the directory {directory} above it belongs to "
            f"{user_name(st.st_uid)}, who could put another store in its place; use a store in a "
            "directory of your own (storeDir, CUDAPKGS_STORE)")
    raise StoreError(
        f"refusing to use the store {root}: the directory {directory} above it is writable by other "
        f"users (mode {stat.S_IMODE(st.st_mode):04o}, no sticky bit), who could put another store in "
        f"its place; fix it with: chmod go-w {shell_word(directory)}")


def _refuse_writable_by_others(root: Path, db_file: Path) -> None:
    """StoreError if the store root, its .meta directory or its database is group- or world-writable, or
    if it or a directory above it belongs to another user (`_refuse_owned_by_others`)."""
    _refuse_owned_by_others(root)
    for target in (root, root / ".meta", db_file):
        try:
            st = os.stat(target)
        except FileNotFoundError:
            continue
        if st.st_mode & 0o022:
            raise StoreError(
                f"refusing to use the store {root}: {target} is writable by other users "
                f"(mode {stat.S_IMODE(st.st_mode):04o}), who could replace store paths and their metadata; "
                f"fix it with: chmod go-w {shell_word(target)}"
            )


def parse_store_path(store_dir: str, path: str | os.PathLike[str]) -> str:
    """The store path of the store at `store_dir` (absolute, normalised) that `path` names: a store path, a
    path inside one, or a symlink such as ./result to one (links followed, at most 40, but not a store path
    that is itself a link). Needs no open store: a command checks its paths before `Store.open` makes a store.
    Raises StoreError (one line) for a path that does not exist and is no store path, or is not in `store_dir`."""
    text = os.path.abspath(os.fspath(path))
    seen = 0
    prefix = store_dir + "/"
    # Follow links such as ./result or .gcroots entries, but not a store path that is itself a symlink.
    while not (text.startswith(prefix) and not text[len(prefix):].startswith(".")) and os.path.islink(text) and seen < 40:
        text = os.path.normpath(os.path.join(os.path.dirname(text), os.readlink(text)))
        seen += 1
    if not text.startswith(prefix) and not os.path.lexists(text) and not is_hash_part(os.path.basename(text)[:32]):
        # ./result before any build, or a typo: not a store path of another store either
        raise StoreError(f"path '{os.fspath(path)}' does not exist (expected a store path, a file in one, "
                         "or a link to one such as ./result from `cudapkgs build`)")
    return to_store_path(store_dir, text)
