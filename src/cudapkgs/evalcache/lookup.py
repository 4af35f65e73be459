"""The fast path: answer a command from its evaluation cache entry, or say that it cannot.

`answer` runs before the command line is parsed and imports only `os`, `sys`, `stat` and
`zlib` (and, for a no-op `build`, SQLite's module), so that a command answered from the
cache costs little more than the interpreter's start-up.  The entry is found by the key
(`cudapkgs.evalcache.entry.key_of`) and used only when every check passes; on any doubt
(a changed or vanished input, a malformed entry, an error of any kind) it answers None
and the command runs in full, which records a new entry.

Checks, in order: the entry is a regular file of this user, not writable by others, at
most `MAX_BYTES`; it parses and holds exactly this key; every file and directory it
recorded has the same identity (mode, size, mtime, ctime, inode, device) or is still
absent; every `sys.path` directory is unchanged (the working directory, `sys.path[0]` under
``python -m``, may change as long as no new entry in it is named like an imported top-level
module); for a no-op build, the store is not writable by others nor theirs (nor a directory above it), every output path exists
and is valid in the store's database, and every result link and its GC root point where
they did.  Then the recorded stdout and stderr are written out again, in order.
"""

from __future__ import annotations

import os
import stat
import sys

from .entry import (DEBUG_ENV, MAX_BYTES, cache_dir, decode, entry_name, is_whole, key_of, note_lookups, stat_identity,
                    wanted)


def answer(argv: list[str]) -> int | None:
    """The exit status of ``argv`` answered from the cache (its output already written), or None:
    not a cached command, disabled, no entry, or any check failed.  Never raises."""
    if not wanted(argv):
        return None
    note_lookups()  # a miss records, and needs the names looked up but not found (`record.Recorder._fields`)
    try:
        why = _check(argv)
    except Exception as error:  # any doubt is a miss
        why = f"{type(error).__name__}: {error}"
    if isinstance(why, str):
        if os.environ.get(DEBUG_ENV):
            print(f"cudapkgs: eval cache: miss ({why})", file=sys.stderr)
        return None
    if os.environ.get(DEBUG_ENV):
        print("cudapkgs: eval cache: hit", file=sys.stderr)
    try:
        for tag, text in why:
            (sys.stdout if tag == "1" else sys.stderr).write(text)
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # as the command line does: a closed pipe is no error
        pass
    return 0


def _read(path: str) -> bytes | None:
    """The entry at ``path``: a regular file of this user that no one else can write, at most
    `MAX_BYTES`; None otherwise (never follows a symlink, never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_size > MAX_BYTES:
            return None
        chunks = []
        left = st.st_size + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) == st.st_size else None
    finally:
        os.close(fd)


def _check(argv: list[str]) -> list[tuple[str, str]] | str:
    """The output chunks to replay, or why not (a short reason)."""
    return _check_key(key_of(argv), False)


def derivations(key: str) -> tuple[str, list[tuple[str, str]]] | str:
    """The ``D`` payload of the derivations entry of ``key`` (`cudapkgs.evalcache.derivations`)
    and the entry's fields, when every input its evaluation read is unchanged; else why not.
    Never raises."""
    try:
        found = _check_key(key, True)
    except Exception as error:  # any doubt is a miss
        return f"{type(error).__name__}: {error}"
    if isinstance(found, str):
        return found
    (_, payload), *fields = found
    return payload, fields


def _check_key(key: str, want_derivations: bool) -> list[tuple[str, str]] | str:
    """The output chunks to replay (or, ``want_derivations``, the ``D`` field first, then the
    entry's fields), or why not (a short reason)."""
    directory = cache_dir()
    if directory is None:
        return "no cache directory"
    data = _read(os.path.join(directory, entry_name(key)))
    if data is None:
        return "no entry"
    fields = decode(data)
    if fields is None or not fields or fields[0] != ("k", key):
        return "entry malformed or of another key"
    output: list[tuple[str, str]] = []
    top_level: set[str] = set()
    changed_path_dirs: list[str] = []
    store: tuple[str, str, str] | None = None
    valid: list[str] = []
    links: list[list[str]] = []
    drvs: str | None = None
    if not want_derivations and len(fields) > 1 and fields[1][0] == "D" and (len(fields) < 3 or fields[2][0] != "d"):
        return "derivations only (the build runs, without evaluating)"  # `Recorder._fields` puts them first
    for tag, payload in fields[1:]:
        if tag == "s" or tag == "l" or tag == "p":
            path, sep, recorded = payload.rpartition("\0")
            if not sep or not path.startswith("/"):
                return "entry malformed"
            if stat_identity(path, tag != "l", is_whole(recorded)) != recorded:
                if tag != "p":
                    return f"changed: {path}"
                changed_path_dirs.append(path)
        elif tag == "1" or tag == "2":
            output.append((tag, payload))
        elif tag == "t":
            top_level.update(payload.split("\0"))
        elif tag == "d":
            parts = payload.split("\0")
            if len(parts) != 3 or store is not None:
                return "entry malformed"
            store = (parts[0], parts[1], parts[2])
        elif tag == "v":
            valid.append(payload)
        elif tag == "L":
            parts = payload.split("\0")
            if len(parts) != 3:
                return "entry malformed"
            links.append(parts)
        elif tag == "D":
            if drvs is not None:
                return "entry malformed"
            drvs = payload
        else:  # "k" again
            return "entry malformed"
    for directory in changed_path_dirs:
        why = _shadowing(directory, top_level)
        if why:
            return why
    if want_derivations:  # the store is checked anew by the build
        if drvs is None:
            return "no derivations"
        return [("D", drvs), *fields[1:]]
    if drvs is not None and store is None:
        return "derivations only (the build runs, without evaluating)"
    if valid or links:
        if store is None:
            return "entry malformed"
        why = _check_store(store, valid, links)
        if why:
            return why
    return output


def _shadowing(directory: str, top_level: set[str]) -> str:
    """Why a changed `sys.path` directory spoils the entry ("" when it does not): only the working
    directory (``python -m``'s `sys.path[0]`) may change, and only with no entry in it named like
    a top-level module that was imported (``json.py``, ``cudapkgs/``) or a ``.pth`` file."""
    if directory != os.getcwd():
        return f"changed: {directory}"
    for name in os.listdir(directory):
        if name.partition(".")[0] in top_level or name.endswith(".pth"):
            return f"{directory}/{name} may shadow a module"
    return ""


def _check_store(store: tuple[str, str, str], valid: list[str], links: list[list[str]]) -> str:
    """Why the outputs of a no-op build cannot be taken as built ("" when they can): the store as
    `Store.open` would refuse it (writable by others, not writable by us, another schema
    version), an output gone from disk or invalid in the database, a result link or its GC
    root entry not pointing where it did; a store, or a directory above it, or a link on the way to
    it, of another user."""
    store_dir, db_file, schema = store
    if not os.path.isabs(store_dir) or db_file != os.path.join(store_dir, ".meta", "db.sqlite"):
        return "entry malformed"
    trusted = (os.geteuid(), 0)
    from ..path_links import foreign_link  # os and stat only

    if foreign_link(db_file, trusted) is not None:  # as `Store.open`: a link of another user on the way
        return "the store is reached through a link of another user"
    for target in (store_dir, os.path.join(store_dir, ".meta"), db_file):
        st = os.stat(target)
        if st.st_mode & 0o022:
            return f"{target} is writable by others"
        if st.st_uid not in trusted:
            return f"{target} belongs to another user"
        if target != db_file and not os.access(target, os.W_OK):
            return f"cannot write {target}"
    from ..owners import foreign_directory_above  # os, stat and path_links only

    above = foreign_directory_above(store_dir, trusted)  # as `Store.open`: the directories above
    if above is not None:
        return f"{above[0]} above the store belongs to or is writable by another user"
    if not stat.S_ISREG(os.stat(db_file).st_mode):
        return "the store database is not a regular file"
    prefix = store_dir.rstrip("/") + "/"
    for path in valid:
        name = path[len(prefix):]
        if not path.startswith(prefix) or not name or "/" in name or name.startswith("."):
            return "entry malformed"
        os.lstat(path)  # FileNotFoundError: gone from disk
    for link, target, root in links:
        if os.readlink(link) != target or os.readlink(root) != link or target not in valid:
            return f"result link {link} changed"
    try:
        from _sqlite3 import connect  # sqlite3 itself imports datetime (3 ms); the connection is the same
    except ImportError:  # pragma: no cover - an interpreter without the private module
        from sqlite3 import connect
    conn = connect("file:" + _quote(db_file) + "?mode=ro", uri=True, timeout=60, isolation_level=None)
    try:
        row = conn.execute("SELECT version FROM SchemaVersion").fetchone()
        if row is None or str(row[0]) != schema:
            return "the store database has another schema version"
        for path in valid:
            if conn.execute("SELECT 1 FROM ValidPaths WHERE path = ?", (path,)).fetchone() is None:
                return f"{path} is not valid in the store"
    finally:
        conn.close()
    return ""


_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/-_.~")


def _quote(path: str) -> str:
    """``path`` percent-encoded for a ``file:`` URI (as `urllib.parse.quote`, which imports `re`)."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in os.fsencode(path))
