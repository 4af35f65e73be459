"""Pinned source archives of packages built here, found in a local content-addressed mirror.

Until the fetchers (`cudapkgs.fetch`) serve them, a package's source is a local
archive looked up by file name in ``$CUDAPKGS_SOURCES`` (directories separated
by ``:``), else in ``shared/sources`` beside the repository checkout.  The
archive's SHA-256 is checked at evaluation against the pinned value, so a
different file is an error, never a different build.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from ..errors import EvalError

__all__ = ["source_archive", "source_dirs"]


def source_dirs() -> list[Path]:
    """Where source archives are looked for, in order."""
    env = os.environ.get("CUDAPKGS_SOURCES")
    if env:
        return [Path(d) for d in env.split(os.pathsep) if d]
    beside = Path(__file__).resolve().parents[3].parent / "shared" / "sources"
    return [beside] if beside.is_dir() else []


@functools.cache
def _sha256(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def source_archive(package: str, file_name: str, sha256: str) -> Path:
    """The archive `file_name` with SHA-256 `sha256` (hex); raises EvalError saying where it looked."""
    dirs = source_dirs()
    for d in dirs:
        candidate = d / file_name
        if candidate.is_file():
            st = candidate.stat()
            got = _sha256(os.fspath(candidate), st.st_mtime_ns, st.st_size)
            if got != sha256:
                raise EvalError(f"{package}: {candidate} has sha256 {got}, expected {sha256}")
            return candidate
    where = ", ".join(map(str, dirs)) or "nowhere: set CUDAPKGS_SOURCES"
    raise EvalError(f"{package}: its source {file_name} (sha256 {sha256}) is not in the source mirror ({where})")
