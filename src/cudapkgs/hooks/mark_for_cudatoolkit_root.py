"""markForCudatoolkitRootHook: mark an output for inclusion in CUDAToolkit_ROOT.

Nixpkgs: pkgs/development/cuda-modules/packages/markForCudatoolkitRootHook.
The marker file is ``nix-support/include-in-cudatoolkit-root``; setupCudaHook
(`hooks.setup_cuda`) collects every marked input output into CUDAToolkit_ROOT.
"""

from __future__ import annotations

from pathlib import Path

from .. import confine

from .runpath_plan import Outputs

__all__ = ["MARKER", "mark_for_cudatoolkit_root"]

MARKER = "nix-support/include-in-cudatoolkit-root"


def mark_for_cudatoolkit_root(outputs: Outputs, *, pname: str | None = None, strict_deps: bool = True) -> list[Path]:
    """markForCudatoolkitRootHook: create nix-support/include-in-cudatoolkit-root in each output.

    Empty under strictDeps, else ``<pname>-<output>``.  An existing marker is left as is.
    """
    made = []
    for name, root in outputs.items():
        marker = Path(root) / MARKER
        confine.require_real_dirs(root, marker, include_self=True)  # never written through a planted link
        if marker.exists():
            continue
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("" if strict_deps else f"{pname}-{name}")
        made.append(marker)
    return made
