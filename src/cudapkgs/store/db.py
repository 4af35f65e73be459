"""The store's metadata database (SQLite, WAL mode, every write in a transaction)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS SchemaVersion (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ValidPaths (
    path TEXT PRIMARY KEY NOT NULL,
    hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    deriver TEXT,
    registration_time INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS Refs (
    referrer TEXT NOT NULL REFERENCES ValidPaths(path) ON DELETE CASCADE,
    reference TEXT NOT NULL,
    PRIMARY KEY (referrer, reference)
);
CREATE INDEX IF NOT EXISTS RefsByReference ON Refs(reference);
-- Outputs kept to be put back after a gc (cudapkgs.store.reuse).
CREATE TABLE IF NOT EXISTS ReusableOutputs (
    path TEXT PRIMARY KEY NOT NULL,
    hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    refs TEXT NOT NULL,
    listing TEXT NOT NULL,
    collected INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS ReusableInodes (
    dev INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    PRIMARY KEY (dev, ino)
);
"""


class PathInfo(NamedTuple):
    """What the store knows about one valid path (a named tuple: `dataclasses` costs start-up time)."""

    path: str
    nar_hash: str
    nar_size: int
    references: tuple[str, ...]
    deriver: str | None
    registration_time: int

    def to_json(self) -> dict[str, object]:
        """The Nix `path-info --json` shape (camelCase keys)."""
        return {
            "path": self.path,
            "narHash": self.nar_hash,
            "narSize": self.nar_size,
            "references": list(self.references),
            "deriver": self.deriver,
            "registrationTime": self.registration_time,
        }


def _switch_to_wal(conn: sqlite3.Connection, attempts: int = 100) -> str:
    """Set WAL mode, waiting out other processes doing the same on a new database.

    Changing the journal mode needs an exclusive lock that SQLite's busy timeout does
    not wait for, so two processes opening a fresh store at once would otherwise fail.
    """
    import time

    for attempt in range(attempts):
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
    raise AssertionError("unreachable")


def _connect_read_only(db_file: str) -> sqlite3.Connection:
    """A read-only connection: ``mode=ro``; for a WAL database in a directory this user cannot
    write (no -shm to map), ``immutable=1``, which reads the committed database file alone."""
    from urllib.parse import quote

    uri = "file:" + quote(db_file)
    try:
        conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("SELECT count(*) FROM ValidPaths").fetchone()
        return conn
    except sqlite3.OperationalError:
        if os.access(os.path.dirname(db_file), os.W_OK):
            raise
    conn = sqlite3.connect(uri + "?immutable=1", uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("SELECT count(*) FROM ValidPaths").fetchone()
    return conn


def _connect_writable(db_file: str) -> sqlite3.Connection:
    """A connection that writes: BEGIN issued by `StoreDB.transaction` (isolation_level None), a 60 s busy
    timeout, foreign keys enforced."""
    # isolation_level=None: we issue BEGIN ourselves so writes take the lock up front.
    conn = sqlite3.connect(db_file, timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


#: Every StoreDB of this process, for a forked child (`_after_fork_in_child`).
_OPEN: weakref.WeakSet[StoreDB] = weakref.WeakSet()

#: Held across every write transaction of this process, and by fork() (`_before_fork`): no process forks
#: while one of its threads holds SQLite's write lock.
_FORK_GUARD = threading.RLock()


def _before_fork() -> None:
    _FORK_GUARD.acquire()


def _after_fork_in_parent() -> None:
    _FORK_GUARD.release()


def _after_fork_in_child() -> None:
    """A forked child never uses nor closes the parent's SQLite connections; each StoreDB opens its own on
    first use.  SQLite: "do not open an SQLite database connection, then fork(), then try to use that
    database connection in the child process" (https://www.sqlite.org/howtocorrupt.html, section 2.6).
    The parent's copy may be mid-statement on a parent's thread (its mutex held for ever in the child), and
    closing it is no better (a rollback rewrites the WAL index the parent shares), so it is kept alive for
    ever (`Py_IncRef`: not even the child's interpreter finalisation closes it) and only forgotten.

    Fork waits for the write transactions of this process's threads (`_FORK_GUARD`, `_before_fork`):
    SQLite's record of the locks a process holds is per process, and the child inherits it, so a fork
    inside a parent's transaction left the child's copy in it ("cannot start a transaction within a
    transaction") and a new connection of the child waiting for ever on a write lock the parent's record
    said this process held."""
    global _FORK_GUARD
    _FORK_GUARD = threading.RLock()
    for db in list(_OPEN):
        conn, db._conn = db._conn, None
        if conn is not None:
            import ctypes

            ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


class StoreDB:
    """A connection to the metadata database at `db_file`.

    After fork() the child's StoreDB opens a connection of its own when first used (`_after_fork_in_child`).
    """

    def __init__(self, db_file: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.db_file = os.fspath(db_file)
        self.read_only = read_only
        self._closed = False
        self._conn: sqlite3.Connection | None
        if read_only:
            self._conn = _connect_read_only(self.db_file)
            _OPEN.add(self)
            return
        self._conn = _connect_writable(self.db_file)
        mode = _switch_to_wal(self._conn)
        if mode.lower() != "wal":  # pragma: no cover - filesystems without shared memory
            self._conn.execute("PRAGMA journal_mode = DELETE")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        with self.transaction():
            for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                self._conn.execute(statement)
            row = self._conn.execute("SELECT version FROM SchemaVersion").fetchone()
            if row is None:
                self._conn.execute("INSERT INTO SchemaVersion VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] > SCHEMA_VERSION:
                from ..errors import StoreError

                raise StoreError(f"the store database {self.db_file} has schema version {row[0]}; this cudapkgs knows up to {SCHEMA_VERSION}")
        _OPEN.add(self)

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection (this process's: a forked child's is opened here, on first use).  Raises
        sqlite3.ProgrammingError once `close` was called, as a closed connection does."""
        conn = self._conn
        if conn is None:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            if self.read_only:
                conn = _connect_read_only(self.db_file)
            else:
                conn = _connect_writable(self.db_file)
                conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
        return conn

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT, rolled back on any exception; no fork() of this process meanwhile
        (`_FORK_GUARD`)."""
        with _FORK_GUARD:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def is_valid(self, path: str) -> bool:
        return self.conn.execute("SELECT 1 FROM ValidPaths WHERE path = ?", (path,)).fetchone() is not None

    def query(self, path: str) -> PathInfo | None:
        row = self.conn.execute("SELECT path, hash, size, deriver, registration_time FROM ValidPaths WHERE path = ?", (path,)).fetchone()
        if row is None:
            return None
        return PathInfo(row[0], row[1], row[2], tuple(self.references(path)), row[3], row[4])

    def references(self, path: str) -> list[str]:
        return [r for (r,) in self.conn.execute("SELECT reference FROM Refs WHERE referrer = ? ORDER BY reference", (path,))]

    def referrers(self, path: str) -> list[str]:
        return [r for (r,) in self.conn.execute("SELECT referrer FROM Refs WHERE reference = ? ORDER BY referrer", (path,))]

    def all_paths(self) -> list[str]:
        return [p for (p,) in self.conn.execute("SELECT path FROM ValidPaths ORDER BY path")]

    def register(self, path: str, nar_hash: str, nar_size: int, references: Iterable[str], deriver: str | None) -> None:
        """Record `path` as valid with its references, in one transaction."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO ValidPaths (path, hash, size, deriver, registration_time) VALUES (?, ?, ?, ?, ?)",
                (path, nar_hash, nar_size, deriver, int(time.time())),
            )
            conn.execute("DELETE FROM Refs WHERE referrer = ?", (path,))
            conn.executemany("INSERT INTO Refs (referrer, reference) VALUES (?, ?)", ((path, r) for r in sorted(set(references))))

    def register_many(self, entries: Iterable[tuple[str, str, int, Iterable[str], str | None]]) -> None:
        """Record several paths (path, nar_hash, nar_size, references, deriver) in one transaction."""
        now = int(time.time())
        with self.transaction() as conn:
            for path, nar_hash, nar_size, references, deriver in entries:
                conn.execute(
                    "INSERT OR REPLACE INTO ValidPaths (path, hash, size, deriver, registration_time) VALUES (?, ?, ?, ?, ?)",
                    (path, nar_hash, nar_size, deriver, now),
                )
                conn.execute("DELETE FROM Refs WHERE referrer = ?", (path,))
                conn.executemany(
                    "INSERT INTO Refs (referrer, reference) VALUES (?, ?)", ((path, r) for r in sorted(set(references)))
                )

    def invalid_paths(self, paths: Iterable[str]) -> list[str]:
        """The paths among `paths` that are not valid (one query, for fast no-op builds)."""
        wanted = list(dict.fromkeys(paths))
        valid: set[str] = set()
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            marks = ",".join("?" * len(chunk))
            valid.update(row[0] for row in self.conn.execute(f"SELECT path FROM ValidPaths WHERE path IN ({marks})", chunk))
        return [p for p in wanted if p not in valid]

    def invalidate(self, paths: Iterable[str]) -> None:
        """Forget `paths` (and the references they hold), in one transaction."""
        with self.transaction() as conn:
            for path in paths:
                conn.execute("DELETE FROM Refs WHERE referrer = ?", (path,))
                conn.execute("DELETE FROM ValidPaths WHERE path = ?", (path,))
