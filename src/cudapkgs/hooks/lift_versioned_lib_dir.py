"""buildRedist's postUnpack step for per-CUDA-major library dirs (``lib/12/``, ``lib/13/``).

Nixpkgs: pkgs/development/cuda-modules/buildRedist (postUnpack, e.g. cuDNN/cuTENSOR archives).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .. import confine

__all__ = ["lift_versioned_lib_dir"]


def lift_versioned_lib_dir(tree: Path, cuda_major: int | str) -> bool:
    """postUnpack: if ``lib/<cuda_major>/`` exists, it replaces ``lib/``.  Return whether it did."""
    lib = Path(tree) / "lib"
    versioned = lib / str(cuda_major)
    if lib.is_symlink() or not versioned.is_dir() or versioned.is_symlink():
        return False
    confine.require_real_dirs(tree, versioned, include_self=True)
    tmp = Path(tree) / f".lib-{cuda_major}.tmp"
    versioned.rename(tmp)
    shutil.rmtree(lib)
    tmp.rename(lib)
    return True
