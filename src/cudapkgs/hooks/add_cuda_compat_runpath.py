"""autoAddCudaCompatRunpath: put cuda_compat's directory first, so its libcuda wins over the driver's.

Nixpkgs: pkgs/development/cuda-modules/packages/autoAddCudaCompatRunpath.
"""

from __future__ import annotations

import os

from .runpath_plan import Outputs, RunpathPlan, rewrite_runpaths

__all__ = ["add_cuda_compat_runpath"]


def add_cuda_compat_runpath(
    outputs: Outputs, compat_dir: str | os.PathLike[str], *, plan: RunpathPlan | None = None
) -> RunpathPlan:
    """autoAddCudaCompatRunpath: prepend cuda_compat's dir (once) to every ELF's RUNPATH."""
    d = os.fspath(compat_dir)
    return rewrite_runpaths(outputs, plan, lambda rp: [d, *(e for e in rp if e != d)])
