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
    import shutil  # here: a few ms of start-up that commands finding no program do not pay

    if os.sep in name:
        found = shutil.which(name)
        return os.path.abspath(found) if found else None
    return shutil.which(name, path=absolute_path(path))
