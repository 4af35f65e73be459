"""autoPatchelfHook: every ELF's RUNPATH becomes exactly the directories that satisfy its DT_NEEDED.

Nixpkgs: pkgs/build-support/setup-hooks/auto-patchelf.sh (+ auto-patchelf.py).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..elf import read as elf
from .errors import FixupError
from .runpath_plan import Outputs, RunpathPlan, dedup, output_roots, with_plan

__all__ = [
    "ALWAYS_ALLOWED_MISSING", "HOST_LIBS", "PROVIDERS", "AutoPatchelfReport", "UnresolvedDependencyError",
    "auto_patchelf", "provider",
]

# The driver provides libcuda at run time (via the driver dir); never an error.
ALWAYS_ALLOWED_MISSING = ("libcuda.so.1",)
# Provided by the host's dynamic loader from its default dirs (glibc, and the C/C++
# runtimes that buildRedist takes from the compiler), so they need no RUNPATH entry.
# On Nix these come from glibc/gccForLibs buildInputs; pass such dirs as
# dependency_lib_dirs to pin them, since dependencies are searched first.
HOST_LIBS = (
    "ld-linux*.so.*",
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "libmvec.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
)


# Which package provides a library an input list may lack (fnmatch pattern -> attribute path).
PROVIDERS = (
    ("libz.so.*", "zlib"),
    ("libibverbs.so.*", "rdma-core"),
    ("librdmacm.so.*", "rdma-core"),
    ("libmlx5.so.*", "rdma-core"),
    ("libnuma.so.*", "numactl"),
    ("libcudart.so.*", "cudaPackages.cuda_cudart"),
    ("libcublas.so.*", "cudaPackages.libcublas"),
    ("libcublasLt.so.*", "cudaPackages.libcublas"),
    ("libnvrtc.so.*", "cudaPackages.cuda_nvrtc"),
    ("libnvrtc-builtins.so.*", "cudaPackages.cuda_nvrtc"),
    ("libnvJitLink.so.*", "cudaPackages.libnvjitlink"),
    ("libcufft.so.*", "cudaPackages.libcufft"),
    ("libcurand.so.*", "cudaPackages.libcurand"),
    ("libcusparse.so.*", "cudaPackages.libcusparse"),
    ("libcusolver.so.*", "cudaPackages.libcusolver"),
    ("libcudnn*.so.*", "cudaPackages.cudnn"),
    ("libnccl.so.*", "cudaPackages.nccl"),
)


def provider(lib: str) -> str | None:
    """The attribute path of the package that provides `lib` (a DT_NEEDED name), if known."""
    return next((attr for pattern, attr in PROVIDERS if fnmatch.fnmatchcase(lib, pattern)), None)


class UnresolvedDependencyError(FixupError):
    """Some DT_NEEDED entries were found in no output or dependency directory."""

    def __init__(self, missing: Sequence[tuple[Path, str]]):
        self.missing = list(missing)
        lines = []
        for path, lib in self.missing:
            who = provider(lib)
            hint = f" (provided by {who}: add it to buildInputs)" if who else ""
            lines.append(f"  {path}: {lib}{hint}")
        joined = "\n".join(lines)
        super().__init__(f"auto_patchelf: {len(self.missing)} unresolved DT_NEEDED:\n{joined}")


@dataclass
class AutoPatchelfReport:
    """What `auto_patchelf` did: each patched file's RUNPATH and the misses it let through."""

    runpaths: dict[Path, list[str]] = field(default_factory=dict)
    resolved: dict[Path, dict[str, Path]] = field(default_factory=dict)
    ignored_missing: list[tuple[Path, str]] = field(default_factory=list)
    patchelf_calls: int = 0


def _library_index(plan: RunpathPlan, dirs: Iterable[Path], *, recursive: bool) -> dict[str, list[Path]]:
    """Map file name → directories (in search order) holding an ELF shared object of that name.

    Symlinks count (libfoo.so.1 → libfoo.so.1.2 is how sonames are provided).
    """
    index: dict[str, list[Path]] = {}
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            continue
        walker = os.walk(d) if recursive else [(os.fspath(d), [], os.listdir(d))]
        for dirpath, dirnames, filenames in walker:
            dirnames.sort()
            for name in sorted(filenames):
                if ".so" not in name:
                    continue
                full = Path(dirpath, name)
                target = full.resolve() if full.is_symlink() else full
                if not elf.is_elf(target):
                    continue
                dirs_for = index.setdefault(name, [])
                if Path(dirpath) not in dirs_for:
                    dirs_for.append(Path(dirpath))
                plan.info(target)  # warm the cache for the compatibility check
    return index


def auto_patchelf(
    outputs: Outputs,
    dependency_lib_dirs: Sequence[Path],
    *,
    append_runpaths: Sequence[str] = ("$ORIGIN",),
    ignore_missing: Iterable[str] = (),
    host_libs: Iterable[str] = HOST_LIBS,
    interpreter: str | None = None,
    plan: RunpathPlan | None = None,
) -> AutoPatchelfReport:
    """autoPatchelfHook: set every ELF's RUNPATH to exactly the dirs satisfying its DT_NEEDED.

    Libraries are looked up by file name, first anywhere in the outputs, then in
    `dependency_lib_dirs` (non-recursive, in order); a candidate must match the
    file's ELF class and machine.  `append_runpaths` follow the found dirs.
    `ignore_missing` holds fnmatch patterns (``*`` ignores all); libcuda.so.1 is
    always allowed to be missing.  `host_libs` (fnmatch patterns) not found there
    are left to the host's loader, with no RUNPATH entry.  With `interpreter`,
    executables get it too.  Raises `UnresolvedDependencyError` (nothing written).
    """
    report = AutoPatchelfReport()
    ignore = (*ALWAYS_ALLOWED_MISSING, *ignore_missing)
    host = tuple(host_libs)

    def go(plan: RunpathPlan) -> None:
        files = plan.dynamic_files(outputs)
        own = _library_index(plan, output_roots(outputs), recursive=True)
        deps = _library_index(plan, dependency_lib_dirs, recursive=False)
        missing: list[tuple[Path, str]] = []
        for path in files:
            info = plan.info(path)
            found_dirs: list[str] = []
            resolved: dict[str, Path] = {}
            for lib in info.needed:
                hit = _resolve(plan, info, lib, own) or _resolve(plan, info, lib, deps)
                if hit is None:
                    if any(fnmatch.fnmatchcase(lib, pat) for pat in host):
                        continue
                    if any(fnmatch.fnmatchcase(lib, pat) for pat in ignore):
                        report.ignored_missing.append((path, lib))
                    else:
                        missing.append((path, lib))
                    continue
                resolved[lib] = hit / lib
                found_dirs.append(os.fspath(hit))
            runpath = dedup([*found_dirs, *append_runpaths])
            plan.set_runpath(path, runpath)
            if interpreter is not None and info.interpreter is not None:
                plan.set_interpreter(path, interpreter)
            report.runpaths[path] = runpath
            report.resolved[path] = resolved
        if missing:
            raise UnresolvedDependencyError(missing)

    done = with_plan(plan, go)
    report.patchelf_calls = done.patchelf_calls
    return report


def _resolve(plan: RunpathPlan, info: elf.ElfInfo, lib: str, index: dict[str, list[Path]]) -> Path | None:
    for d in index.get(lib, ()):
        cand = (d / lib).resolve()
        if plan.info(cand).compatible_with(info):
            return d
    return None
