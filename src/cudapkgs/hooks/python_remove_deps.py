"""pythonRemoveDeps: drop requirements from an installed distribution's METADATA.

Nixpkgs: pkgs/development/interpreters/python/hooks/python-relax-deps-hook.sh
(``pythonRemoveDeps``, a list of distribution names, or true for all).  There the
hook edits the wheel's METADATA before pypaInstallHook installs it; here it edits
the installed ``*.dist-info/METADATA``, and the RECORD rewrite that follows
(`cudapkgs.hooks.python_record`) gives the file its new digest.  Names are matched
after PEP 503 normalisation (``nvidia_cublas`` = ``nvidia-cublas``) and may be
fnmatch patterns (``nvidia-*``), since a CUDA wheel's requirements replaced by a
set's libraries are a family of names.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path

from .errors import FixupError

__all__ = ["remove_requirements", "requirement_name"]

# PEP 508: a requirement starts with its distribution name.
_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def requirement_name(requirement: str) -> str:
    """The normalised distribution name a ``Requires-Dist`` value starts with; FixupError if none."""
    match = _NAME.match(requirement)
    if match is None:
        raise FixupError(f"Requires-Dist {requirement!r} does not start with a distribution name")
    return _normalise(match.group(1))


def remove_requirements(dist_info: Path, patterns: Sequence[str]) -> list[str]:
    """Remove the ``Requires-Dist`` lines of ``dist_info/METADATA`` whose name matches one of
    `patterns`; return the removed requirement values, in file order.

    Only the header block is edited (the description after the first blank line is kept
    byte for byte).  A pattern that matches no requirement raises `FixupError` (as
    ``substituteInPlace --replace-fail``: a wheel that changed its requirements must be
    looked at again, not silently kept).
    """
    metadata = dist_info / "METADATA"
    text = metadata.read_text(encoding="utf-8")
    head, sep, body = text.partition("\n\n")
    wanted = [_normalise(p) for p in patterns]
    used = {p: False for p in wanted}
    kept, removed = [], []
    for line in head.split("\n"):
        key, colon, value = line.partition(":")
        if colon and key.strip().lower() == "requires-dist":
            name = requirement_name(value)
            hits = [p for p in wanted if fnmatch.fnmatchcase(name, p)]
            if hits:
                for p in hits:
                    used[p] = True
                removed.append(value.strip())
                continue
        kept.append(line)
    unused = [p for p, hit in used.items() if not hit]
    if unused:
        raise FixupError(f"{metadata}: pythonRemoveDeps {', '.join(unused)} match(es) no Requires-Dist "
                         "(the wheel's requirements changed: look at them again)")
    if removed:
        metadata.write_text("\n".join(kept) + sep + body, encoding="utf-8")
    return removed
