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

import sys
from importlib import import_module
from types import ModuleType

# name -> its module here; imported on first use (start-up: `cudapkgs list` evaluates packages
# whose expressions name a hook module, and importing every hook, with elf/ and pathlib, took 5 ms).
_NAMES: dict[str, str] = {
    "add_cuda_compat_runpath": "add_cuda_compat_runpath",
    **dict.fromkeys(("DEFAULT_DRIVER_DIR", "add_driver_runpath", "default_driver_lib_dir"), "add_driver_runpath"),
    **dict.fromkeys(("ALWAYS_ALLOWED_MISSING", "HOST_LIBS", "AutoPatchelfReport", "UnresolvedDependencyError",
                     "auto_patchelf"), "auto_patchelf"),
    "FixupError": "errors",
    "fixup": "fixup",
    "lift_versioned_lib_dir": "lift_versioned_lib_dir",
    "mark_for_cudatoolkit_root": "mark_for_cudatoolkit_root",
    **dict.fromkeys(("FHSReferenceError", "check_no_fhs_references"), "no_fhs_references"),
    **dict.fromkeys(("EmptyOutputError", "check_outputs_not_empty"), "outputs_not_empty"),
    **dict.fromkeys(("move_pkgconfig", "rewrite_pkgconfig"), "pkgconfig"),
    **dict.fromkeys(("is_stubs_entry", "remove_stubs_from_runpath", "strip_stubs"), "remove_stubs_from_runpath"),
    "RunpathPlan": "runpath_plan",
    "split_outputs": "split_outputs",
}  # fmt: skip


_LOADED: dict[str, ModuleType] = {}  # module (of _NAMES) -> it, once an import of it returned and had the name


class _Hooks(ModuleType):
    """This package's module: a re-exported name is always the hook's function (or class,
    constant), even after its module of the same name was imported, which binds the module
    on the package; as the eager ``from .fixup import fixup`` of before made it."""

    def __getattribute__(self, name: str) -> object:
        module = _NAMES.get(name)
        if module is None:
            return ModuleType.__getattribute__(self, name)
        # `import_module`, not sys.modules: a module is there from the start of its execution, and
        # another build thread importing it now would leave this one a half-made module (AttributeError
        # "partially initialized module"); import_module waits for that import. Kept once complete.
        loaded = _LOADED.get(module)
        if loaded is None:
            loaded = import_module(f"{__name__}.{module}")
            value = getattr(loaded, name)
            _LOADED[module] = loaded
            return value
        return getattr(loaded, name)

    def __dir__(self) -> list[str]:
        return sorted({*ModuleType.__dir__(self), *_NAMES})


sys.modules[__name__].__class__ = _Hooks

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
