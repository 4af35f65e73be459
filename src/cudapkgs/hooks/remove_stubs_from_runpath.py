"""removeStubsFromRunpathHook: a link-time ``stubs/`` directory never stays in a RUNPATH.

Nixpkgs: pkgs/development/cuda-modules/packages/removeStubsFromRunpathHook.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence

from .add_driver_runpath import DEFAULT_DRIVER_DIR
from .runpath_plan import Outputs, RunpathPlan, rewrite_runpaths

__all__ = ["STUBS_GLOB", "is_stubs_entry", "remove_stubs_from_runpath", "strip_stubs"]

STUBS_GLOB = "*-cuda*/lib/stubs"


def is_stubs_entry(entry: str) -> bool:
    """Whether a RUNPATH entry points at link-time stubs: ``*-cuda*/lib/stubs``, any ``…/stubs``, or a
    directory inside a stubs output (``<hash>-…-stubs/lib``, where cuda_cudart links its stubs)."""
    e = entry.rstrip("/")
    return (
        fnmatch.fnmatchcase(e, STUBS_GLOB)
        or os.path.basename(e) == "stubs"
        or any(part.endswith("-stubs") for part in e.split("/")[:-1])
    )


def strip_stubs(runpath: Sequence[str], driver_dir: str) -> list[str]:
    """removeStubsFromRunpathHook on one RUNPATH: the first stubs entry becomes the driver dir."""
    out: list[str] = []
    seen_driver = False
    for e in runpath:
        if is_stubs_entry(e):
            if not seen_driver:
                out.append(driver_dir)
                seen_driver = True
        elif e == driver_dir:
            # Kept only once: a driver dir appended by autoAddDriverRunpath after a
            # replaced stubs entry would otherwise appear twice.
            if not seen_driver:
                out.append(e)
                seen_driver = True
        else:
            out.append(e)
    return out


def remove_stubs_from_runpath(
    outputs: Outputs, driver_dir: str | os.PathLike[str] = DEFAULT_DRIVER_DIR, *, plan: RunpathPlan | None = None
) -> RunpathPlan:
    """removeStubsFromRunpathHook: replace stubs dirs in every RUNPATH by the driver dir, once."""
    d = os.fspath(driver_dir)
    return rewrite_runpaths(outputs, plan, lambda rp: strip_stubs(rp, d))
