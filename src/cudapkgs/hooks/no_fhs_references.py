"""buildRedist's postInstallCheck: no output refers to ``/usr/`` (unless allowFHSReferences).

Nixpkgs: pkgs/development/cuda-modules/buildRedist (allowFHSReferences).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import FixupError
from .runpath_plan import Outputs, output_roots

__all__ = ["FHSReferenceError", "check_no_fhs_references"]


class FHSReferenceError(FixupError):
    """An output refers to /usr/ (and allowFHSReferences is false)."""


def check_no_fhs_references(outputs: Outputs, allow: bool = False, *, text_only: bool = False) -> list[Path]:
    """postInstallCheck: fail if any file (LICENSE files excepted) contains ``/usr/``.

    Like ``grep -r``, symlinks inside the outputs are not followed. With `text_only`,
    a file holding a NUL byte does not count: GNU grep (3.5 on) reports a match in a
    binary file on stderr, and checkCudaFhsRefs reads only its stdout. Each file is
    read once, in 1 MiB chunks (memory stays flat whatever the file size). Returns the
    offending files when `allow` is true; raises `FHSReferenceError` otherwise.
    """
    hits: list[Path] = []
    for root in output_roots(outputs):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith("LICENSE"):
                    continue
                full = Path(dirpath, name)
                if full.is_symlink():
                    continue
                try:
                    if _refers_to_usr(full, text_only):
                        hits.append(full)
                except OSError:
                    continue
    if hits and not allow:
        listed = "\n".join(f"  {p}" for p in hits[:20])
        more = f"\n  … and {len(hits) - 20} more" if len(hits) > 20 else ""
        raise FHSReferenceError(
            f"{len(hits)} file(s) refer to /usr/ (set allowFHSReferences to permit):\n{listed}{more}"
        )
    return hits


_NEEDLE = b"/usr/"
_CHUNK = 1 << 18  # as nar.CHUNK


def _refers_to_usr(path: Path, text_only: bool) -> bool:
    """Whether `path` holds ``/usr/`` (and, with `text_only`, no NUL byte), streaming."""
    found = False
    tail = b""
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            if text_only and b"\0" in chunk:
                return False  # binary: grep would not print it
            if not found:
                data = tail + chunk  # the overlap: a needle split across two chunks is still found
                found = _NEEDLE in data
                tail = data[-(len(_NEEDLE) - 1) :]
            if found and not text_only:
                return True
    return found
