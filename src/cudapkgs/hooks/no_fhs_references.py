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


def check_no_fhs_references(outputs: Outputs, allow: bool = False) -> list[Path]:
    """postInstallCheck: fail if any file (LICENSE files excepted) contains ``/usr/``.

    Like ``grep -r``, symlinks inside the outputs are not followed.  Returns the
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
                    data = full.read_bytes()
                except OSError:
                    continue
                if b"/usr/" in data:
                    hits.append(full)
    if hits and not allow:
        listed = "\n".join(f"  {p}" for p in hits[:20])
        more = f"\n  … and {len(hits) - 20} more" if len(hits) > 20 else ""
        raise FHSReferenceError(
            f"{len(hits)} file(s) refer to /usr/ (set allowFHSReferences to permit):\n{listed}{more}"
        )
    return hits
