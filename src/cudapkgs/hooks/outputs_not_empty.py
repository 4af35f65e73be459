"""buildRedist's postInstallCheck: every output but the exempt ones holds something.

Nixpkgs: pkgs/development/cuda-modules/buildRedist (postInstallCheck's empty-output check).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .errors import FixupError
from .runpath_plan import Outputs

__all__ = ["EmptyOutputError", "check_outputs_not_empty"]


class EmptyOutputError(FixupError):
    """An output holds nothing but nix-support."""


def check_outputs_not_empty(outputs: Outputs, exempt: Iterable[str] = ("out", "dev")) -> None:
    """postInstallCheck: raise `EmptyOutputError` on an output holding nothing but ``nix-support``."""
    exempt = set(exempt)
    empty = [
        name
        for name, root in outputs.items()
        if name not in exempt and not any(c.name != "nix-support" for c in Path(root).iterdir())
    ]
    if empty:
        raise EmptyOutputError(f"output(s) {', '.join(empty)} are empty (only nix-support at most)")
