"""The postFixup RUNPATH chain of buildRedist, run over one shared `RunpathPlan`.

Order as Nixpkgs' buildRedist (pkgs/development/cuda-modules/buildRedist):
autoPatchelf, autoAddDriverRunpath, autoAddCudaCompatRunpath, removeStubsFromRunpath.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from .add_cuda_compat_runpath import add_cuda_compat_runpath
from .add_driver_runpath import DEFAULT_DRIVER_DIR, add_driver_runpath
from .auto_patchelf import HOST_LIBS, AutoPatchelfReport, auto_patchelf
from .remove_stubs_from_runpath import remove_stubs_from_runpath
from .runpath_plan import Outputs, RunpathPlan

__all__ = ["fixup"]


def fixup(
    outputs: Outputs,
    dependency_lib_dirs: Sequence[Path],
    *,
    append_runpaths: Sequence[str] = ("$ORIGIN",),
    ignore_missing: Iterable[str] = (),
    host_libs: Iterable[str] = HOST_LIBS,
    driver_dir: str | os.PathLike[str] | None = DEFAULT_DRIVER_DIR,
    compat_dir: str | os.PathLike[str] | None = None,
    remove_stubs: bool = True,
    interpreter: str | None = None,
) -> AutoPatchelfReport:
    """The postFixup RUNPATH chain with one patchelf call per distinct result.

    Order: autoPatchelf, autoAddDriverRunpath, autoAddCudaCompatRunpath (it must
    come after the driver dir so compat's libcuda wins), removeStubsFromRunpath.
    """
    plan = RunpathPlan()
    report = auto_patchelf(
        outputs,
        dependency_lib_dirs,
        append_runpaths=append_runpaths,
        ignore_missing=ignore_missing,
        host_libs=host_libs,
        interpreter=interpreter,
        plan=plan,
    )
    if driver_dir is not None:
        add_driver_runpath(outputs, driver_dir, plan=plan)
    if compat_dir is not None:
        add_cuda_compat_runpath(outputs, compat_dir, plan=plan)
    if remove_stubs:
        remove_stubs_from_runpath(outputs, driver_dir or DEFAULT_DRIVER_DIR, plan=plan)
    report.runpaths = {p: plan.runpath(p) for p in report.runpaths}
    plan.apply()
    report.patchelf_calls = plan.patchelf_calls
    return report
