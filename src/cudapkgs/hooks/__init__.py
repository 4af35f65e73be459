"""Setup hooks, one module each, named as Nixpkgs names them (pkgs/build-support/setup-hooks/,
pkgs/development/cuda-modules/packages/*Hook).

Fix-up hooks work on `outputs`: a mapping from output name (``out``, ``lib``, …)
to its directory.

| module | Nixpkgs hook |
| --- | --- |
| `auto_patchelf` | autoPatchelfHook |
| `add_driver_runpath` | autoAddDriverRunpath (+ the host's driver dir) |
| `add_cuda_compat_runpath` | autoAddCudaCompatRunpath |
| `remove_stubs_from_runpath` | removeStubsFromRunpathHook |
| `fixup` | buildRedist's postFixup chain of the four above |
| `runpath_plan` | (shared) pending RUNPATH edits written with patchelf once |
| `mark_for_cudatoolkit_root` | markForCudatoolkitRootHook |
| `split_outputs` | multiple-outputs.sh moveToOutput, buildRedist's installPhase |
| `lift_versioned_lib_dir`, `pkgconfig` | buildRedist's postUnpack / prePatch |
| `no_fhs_references`, `outputs_not_empty` | buildRedist's postInstallCheck |
| `python_remove_deps` | pythonRelaxDepsHook's pythonRemoveDeps |
| `python_record` | (installers' RECORD, rewritten after a fix-up) |

The names below are re-exported so that ``from cudapkgs import hooks;
hooks.fixup(...)`` reads as the hook's name.  A hook's function shadows its
module of the same name on the package, so reach a module's other names with
``from cudapkgs.hooks.add_driver_runpath import …``.
"""

from __future__ import annotations

from .add_cuda_compat_runpath import add_cuda_compat_runpath
from .add_driver_runpath import DEFAULT_DRIVER_DIR, add_driver_runpath, default_driver_lib_dir
from .auto_patchelf import ALWAYS_ALLOWED_MISSING, HOST_LIBS, AutoPatchelfReport, UnresolvedDependencyError, auto_patchelf
from .errors import FixupError
from .fixup import fixup
from .lift_versioned_lib_dir import lift_versioned_lib_dir
from .mark_for_cudatoolkit_root import mark_for_cudatoolkit_root
from .no_fhs_references import FHSReferenceError, check_no_fhs_references
from .outputs_not_empty import EmptyOutputError, check_outputs_not_empty
from .pkgconfig import move_pkgconfig, rewrite_pkgconfig
from .remove_stubs_from_runpath import is_stubs_entry, remove_stubs_from_runpath, strip_stubs
from .runpath_plan import RunpathPlan
from .split_outputs import split_outputs

__all__ = [
    "ALWAYS_ALLOWED_MISSING",
    "DEFAULT_DRIVER_DIR",
    "HOST_LIBS",
    "AutoPatchelfReport",
    "EmptyOutputError",
    "FHSReferenceError",
    "FixupError",
    "RunpathPlan",
    "UnresolvedDependencyError",
    "add_cuda_compat_runpath",
    "add_driver_runpath",
    "auto_patchelf",
    "check_no_fhs_references",
    "check_outputs_not_empty",
    "default_driver_lib_dir",
    "fixup",
    "is_stubs_entry",
    "lift_versioned_lib_dir",
    "mark_for_cudatoolkit_root",
    "move_pkgconfig",
    "remove_stubs_from_runpath",
    "rewrite_pkgconfig",
    "split_outputs",
    "strip_stubs",
]
