"""Finding a host program on ``PATH`` the way a program cudapkgs starts on its own may be found.

`shutil.which` (as a shell) takes an empty ``PATH`` entry (``PATH=/usr/bin:``, a trailing colon
left by ``PATH=$PATH:$EXTRA``), ``.`` or any relative entry as the working directory: in a cloned
repository, ``cudapkgs doctor`` then ran the repository's own ``nvidia-smi``, and a build its
``patchelf``, ``xz`` or ``zstd``, with nothing allowed.  cudapkgs looks only in absolute entries,
as Go's ``os/exec.LookPath`` refuses a result relative to the current directory since Go 1.19
(``exec.ErrDot``, "Security" in the os/exec package documentation).
"""

from __future__ import annotations

import os

__all__ = ["absolute_path", "which"]


def absolute_path(path: str | None = None) -> str:
    """`path` (default ``$PATH``, else `os.defpath`) without its empty and relative entries, joined again."""
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    return os.pathsep.join(entry for entry in path.split(os.pathsep) if os.path.isabs(entry))


def which(name: str, path: str | None = None) -> str | None:
    """The absolute path of the executable `name` found in the absolute entries of `path` (default
    ``$PATH``), or None. A `name` holding a slash is taken as `shutil.which` takes it (the caller
    chose that file), made absolute."""
    if os.sep in name:
        found = _which(name)
        return os.path.abspath(found) if found else None
    return _which(name, absolute_path(path))


def _which(cmd: str, path: str | None = None) -> str | None:
    """``shutil.which(cmd, path=path)`` on POSIX, as CPython 3.10-3.12 write it (Lib/shutil.py: a name
    with a directory part is checked as it is; otherwise each distinct entry of `path`, default
    ``$PATH``, then ``os.confstr("CS_PATH")``; the first existing file this user may execute that is
    not a directory).  Here rather than shutil, whose import (bz2, lzma, fnmatch) was about 6 M
    instructions of a cold `cudapkgs list --all`, which looks up every host tool (issue 34 item 4);
    the same stats and access checks, so the evaluation cache records the same inputs."""

    def runnable(candidate: str) -> bool:
        return os.path.exists(candidate) and os.access(candidate, os.F_OK | os.X_OK) and not os.path.isdir(candidate)

    if os.path.dirname(cmd):
        return cmd if runnable(cmd) else None
    if path is None:
        path = os.environ.get("PATH", None)
        if path is None:
            try:
                path = os.confstr("CS_PATH")
            except (AttributeError, ValueError):
                path = os.defpath
    if not path:  # PATH="" finds nothing (":" is the working directory)
        return None
    seen: set[str] = set()
    for directory in os.fsdecode(path).split(os.pathsep):
        if directory not in seen:
            seen.add(directory)
            candidate = os.path.join(directory, cmd)
            if runnable(candidate):
                return candidate
    return None
