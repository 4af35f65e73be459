"""Remembered host probes: what a host tool printed, kept across commands while the tool is unchanged.

Every command used to run ``gcc -dM -E`` (the host compiler probe) and the
``--version`` of cmake, ninja, make, pkg-config and python3; each run costs a
fork, an exec and the tool's own start-up (20-30 ms for gcc).  `run` keeps
the result of one probe in ``$XDG_CACHE_HOME/cudapkgs/probes.json`` keyed by
the probe's arguments and the identity of the executable's resolved file:
real path, size, mtime (ns), ctime (ns), inode and device.  Replacing the
tool (``mv``, ``cp``, a package upgrade) changes at least one of them, so the
next command probes again; ccache-like wrapper scripts are keyed by the
script, not by what they call.

The file is bounded (at most `MAX_ENTRIES` entries, `MAX_BYTES` read; a larger
or malformed file is ignored and rewritten), written atomically (a temporary
file in the same directory, then ``os.replace``), and never required: a cache
that cannot be read or written only means the probe runs.  The working
directory, the environment and any other input of the tool are not keyed:
callers probe with fixed arguments that do not read them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence

TYPE_CHECKING = False  # pathlib is imported where a path is made, not at start-up (docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "Probe", "cache_file", "forget", "remembered", "run"]

MAX_ENTRIES = 256
MAX_BYTES = 1 << 20
_MAX_OUTPUT = 64 << 10  # per stream: a probe printing more is not remembered
_VERSION = 1

Probe = tuple[int, str, str]  # (returncode, stdout, stderr)

_loaded: dict[str, dict[str, list]] = {}  # cache file -> its entries, read once per process


def cache_file() -> Path:
    """``$XDG_CACHE_HOME/cudapkgs/probes.json`` (``~/.cache`` when unset or relative)."""
    from pathlib import Path

    return Path(_cache_path())


def _cache_path() -> str:
    """`cache_file` as a string: a remembered probe makes no `Path` (pathlib, with urllib.parse and
    ipaddress, is about 16 M instructions of a cold `list --all`)."""
    from ..xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    # the same file as pathlib's form (which drops only "." components and repeated slashes)
    return os.path.join(required_dir("XDG_CACHE_HOME"), "cudapkgs", "probes.json")


def _identity(path: str) -> tuple[str, list[int]] | None:
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return real, [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _load(file: str) -> dict[str, list]:
    entries = _loaded.get(file)
    if entries is None:
        entries = _loaded[file] = {}
        try:
            from ..inputs import read_cached

            data = read_cached(file, MAX_BYTES, owned=True)  # a FIFO, a device, another user's file: a miss
            if data:
                parsed = json.loads(data)
                if isinstance(parsed, dict) and parsed.get("version") == _VERSION and isinstance(parsed.get("probes"), dict):
                    entries.update((k, v) for k, v in parsed["probes"].items() if isinstance(v, list) and len(v) == 3)
        except (OSError, ValueError, UnicodeDecodeError):
            pass
    return entries


def _store(file: str, entries: dict[str, list]) -> None:
    while len(entries) > MAX_ENTRIES:  # oldest first (insertion order)
        entries.pop(next(iter(entries)))
    import tempfile

    try:
        os.makedirs(os.path.dirname(file), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(file), prefix=".probes-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"version": _VERSION, "probes": entries}, handle, separators=(",", ":"))
            os.replace(tmp, file)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # an unwritable cache only means the next command probes again


def run(argv: Sequence[str], *, timeout: float = 30) -> Probe:
    """(returncode, stdout, stderr) of ``argv`` (``argv[0]`` a path to an executable), remembered.

    The answer is reused while the resolved file of ``argv[0]`` keeps its size,
    mtime, ctime, inode and device.  Raises `OSError` or
    `subprocess.SubprocessError` (a timeout) as `subprocess.run` does; a
    failed start or timeout is not remembered.
    """
    identity = _identity(argv[0])
    file = _cache_path()
    key = json.dumps([list(argv), identity[0]]) if identity else None
    if key is not None:
        entries = _load(file)
        hit = entries.get(key)
        if hit is not None and hit[0] == identity[1] and isinstance(hit[1], int) and isinstance(hit[2], list):
            return hit[1], hit[2][0], hit[2][1]
    import subprocess  # only when the probe runs: a remembered answer starts no process

    done = subprocess.run(list(argv), capture_output=True, text=True, errors="replace", timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)
    if key is not None and len(done.stdout) <= _MAX_OUTPUT and len(done.stderr) <= _MAX_OUTPUT:
        after = _identity(argv[0])
        if after == identity:  # not replaced while it ran
            entries = _load(file)
            entries.pop(key, None)
            entries[key] = [identity[1], done.returncode, [done.stdout, done.stderr]]
            _store(file, entries)
    return done.returncode, done.stdout, done.stderr


def remembered(key: Sequence[str], compute: "Callable[[], Probe]") -> Probe:
    """`compute()`'s (returncode, stdout, stderr), remembered as `run`'s answers are: under `key` (its
    first item a path to an executable, whose resolved file's identity must not change), for a probe
    that runs the tool in its own way (a private working directory and environment, a bounded read:
    `cudapkgs.pkgs.python_interpreters.ask`).  Only an answer with status 0 is remembered."""
    identity = _identity(key[0])
    file = _cache_path()
    name = json.dumps(["remembered", list(key), identity[0]]) if identity else None
    if name is not None:
        hit = _load(file).get(name)
        if hit is not None and hit[0] == identity[1] and isinstance(hit[1], int) and isinstance(hit[2], list):
            return hit[1], hit[2][0], hit[2][1]
    code, stdout, stderr = compute()
    if name is not None and code == 0 and len(stdout) <= _MAX_OUTPUT and len(stderr) <= _MAX_OUTPUT \
            and _identity(key[0]) == identity:
        entries = _load(file)
        entries.pop(name, None)
        entries[name] = [identity[1], code, [stdout, stderr]]
        _store(file, entries)
    return code, stdout, stderr


def forget() -> None:
    """Drop what this process read of the cache files (a test that rewrites one behind its back)."""
    _loaded.clear()
