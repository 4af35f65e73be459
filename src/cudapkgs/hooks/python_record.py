"""The RECORD of an installed wheel, made true again after the fix-up changed files.

RECORD (packaging.python.org "Recording installed projects", PEP 376/627) lists every
installed file with its digest and size; tools that check an installation
(``pip``'s uninstall, ``importlib.metadata.files``, auditors) read it.  A rewired wheel
changes files after installing them: RUNPATHs, a patched ``__init__.py``, METADATA, removed
and linked files.  `snapshot` records what the installer wrote (size and modification time
per file); `rewrite_record` rehashes exactly the files whose size or time changed since,
drops rows of files that are gone, adds rows for new files (byte code, links: a link's row
has no digest, its target lies in another store path) and writes RECORD with its own row
empty, as installers write it.  Only the changed files are read again (torch's 1.1 GB is
hashed once while it is installed).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import FixupError

__all__ = ["file_digest", "rewrite_record", "snapshot", "write_record"]

_CHUNK = 1 << 20


def snapshot(files: Mapping[Path, tuple[str, str, int]], state_file: Path, *, changed: set[Path] = frozenset()) -> None:
    """Write the files' RECORD rows and (size, mtime_ns) to `state_file` (JSON).

    `files`: path -> (RECORD path, digest, size) as installed; files gone since are left out,
    those in `changed` (edited since, possibly within one tick of the file system's clock)
    are hashed now, links get an empty digest.
    """
    entries = {}
    for path, (record_path, digest, size) in files.items():
        st = _lstat(path)  # one system call per file (torch: 12,260)
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode):
            digest, size = "", 0
        elif path in changed:
            digest, size = file_digest(path)
        entries[os.fspath(path)] = [record_path, digest, size, st.st_size, st.st_mtime_ns]
    state_file.write_text(json.dumps(entries))


def _lstat(path: str | os.PathLike[str]) -> os.stat_result | None:
    """lstat of `path`, or None when nothing is there (a missing parent directory included)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def write_record(dist_info: Path, site: Path, files: Mapping[Path, tuple[str, str, int]]) -> None:
    """Write ``dist_info/RECORD`` listing `files` (path -> (RECORD path, digest, size)) and itself."""
    rows = {record_path: (digest, str(size) if digest else "") for record_path, digest, size in files.values()}
    _write(dist_info / "RECORD", site, rows)


def file_digest(path: Path) -> tuple[str, int]:
    """(RECORD digest ``sha256=…``, size) of the file at `path`."""
    return _digest(path)


def _write(record_file: Path, site: Path, rows: Mapping[str, tuple[str, str]]) -> None:
    own = os.path.relpath(record_file, site).replace(os.sep, "/")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for record_path in sorted(rows):
        if record_path != own:
            writer.writerow([record_path, *rows[record_path]])
    writer.writerow([own, "", ""])
    if record_file.is_symlink():
        raise FixupError(f"{record_file} is a symbolic link")
    record_file.write_text(out.getvalue(), encoding="utf-8")


def _digest(path: Path) -> tuple[str, int]:
    import base64

    from ..store import direct_reads

    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        if stat.S_ISREG(st.st_mode) and direct_reads.written_direct(st):
            # Written past the page cache (a large member of a rewired wheel): read back past it too.
            for chunk in direct_reads.pieces(handle.fileno(), st.st_size):
                h.update(chunk)
                size += len(chunk)
            handle.seek(size)
        while chunk := handle.read(_CHUNK):  # the rest, if it grew meanwhile; every file otherwise
            h.update(chunk)
            size += len(chunk)
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode(), size


def rewrite_record(site: Path, dist_info: Path, state_file: Path, roots: Mapping[str, Path]) -> dict[str, int]:
    """Rewrite ``dist_info/RECORD`` from what is installed now.

    `roots` are the directories whose files belong to the distribution (site-packages and,
    for scripts, ``bin``), walked for new files; `state_file` is `snapshot`'s.  Returns
    counts: ``kept``, ``rehashed``, ``removed``, ``added``.  Raises FixupError when the
    snapshot is missing (the install step did not run).
    """
    try:
        entries = json.loads(state_file.read_text())
    except (OSError, ValueError) as error:
        raise FixupError(f"{state_file}: no install snapshot to rewrite RECORD from ({error})") from None
    record_file = dist_info / "RECORD"
    rows: dict[str, tuple[str, str]] = {}
    counts = {"kept": 0, "rehashed": 0, "removed": 0, "added": 0}
    known = set()
    for path, (record_path, digest, size, st_size, st_mtime) in entries.items():
        known.add(path)
        st = _lstat(path)
        if st is None:
            counts["removed"] += 1
            continue
        if stat.S_ISLNK(st.st_mode):
            rows[record_path] = ("", "")
            counts["kept"] += 1
        elif (st.st_size, st.st_mtime_ns) != (st_size, st_mtime):
            new_digest, new_size = _digest(Path(path))
            rows[record_path] = (new_digest, str(new_size))
            counts["rehashed"] += 1
        else:
            rows[record_path] = (digest, str(size))
            counts["kept"] += 1
    own = os.fspath(record_file)
    for root in roots.values():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                if full in known or full == own:
                    continue
                record_path = os.path.relpath(full, site).replace(os.sep, "/")
                if os.path.islink(full):
                    rows[record_path] = ("", "")
                else:
                    d, s = _digest(Path(full))
                    rows[record_path] = (d, str(s))
                counts["added"] += 1
    _write(record_file, site, rows)
    return counts
