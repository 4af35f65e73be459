"""Checks of a realised closure: where every DT_NEEDED of every ELF file resolves, and which CUDA libraries it holds.

Used by the torch closure test (test_torch_closure.py). The loader's rules, as ld.so(8) states them
for a library with DT_RUNPATH: the library's own RUNPATH (``$ORIGIN`` expanded), then the system's
default directories; no LD_LIBRARY_PATH (the checks run as ``env -i`` would).
"""

from __future__ import annotations

import fnmatch
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from cudapkgs.elf import read as elf

# Provided by the host's C library and compiler runtime (cudapkgs leaves them to the host's loader).
HOST_LIBS = ("ld-linux*.so.*", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
             "libutil.so.1", "libresolv.so.2", "libgcc_s.so.1", "libstdc++.so.6", "libanl.so.1", "libmvec.so.1")
SYSTEM_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
# Sonames of NVIDIA's CUDA libraries: one copy each in a closure with one CUDA.
CUDA_SONAMES = ("libcudart.so.*", "libcublas.so.*", "libcublasLt.so.*", "libcufft.so.*", "libcurand.so.*",
                "libcusolver.so.*", "libcusparse.so.*", "libcusparseLt.so.*", "libcudnn*.so.*", "libnvrtc.so.*",
                "libnvJitLink.so.*", "libcupti.so.*", "libnccl.so.*", "libnvshmem_host.so.*", "libcufile.so.*",
                "libnvToolsExt.so.*")


@dataclass
class ClosureReport:
    """What `check_closure` found."""

    elf_files: int = 0
    needed: int = 0
    unresolved: list[str] = field(default_factory=list)  #: "<file>: <lib>" resolved nowhere allowed
    outside: list[str] = field(default_factory=list)  #: "<file>: <lib> -> <path>" found outside the closure and host libs
    to_driver: list[str] = field(default_factory=list)  #: files whose libcuda.so.1 is left to the driver
    sonames: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  #: CUDA soname -> store paths
    nvidia_trees: list[str] = field(default_factory=list)  #: nvidia/ directories holding libraries


def _expand(entry: str, origin: Path) -> str:
    return entry.replace("${ORIGIN}", os.fspath(origin)).replace("$ORIGIN", os.fspath(origin))


def _store_path_of(path: str, store_dir: str) -> str | None:
    if not path.startswith(store_dir.rstrip("/") + "/"):
        return None
    return os.path.join(store_dir, path[len(store_dir.rstrip("/")) + 1:].split("/", 1)[0])


def check_closure(paths: list[str], store_dir: str, driver_dir: str) -> ClosureReport:
    """Resolve every DT_NEEDED of every ELF file under `paths` (store paths) as the loader would."""
    report = ClosureReport()
    closure = set(paths)
    for root in paths:
        for dirpath, dirnames, filenames in os.walk(root):
            if os.path.basename(dirpath) == "nvidia" and any(
                    os.path.isdir(os.path.join(dirpath, d, "lib")) for d in dirnames):
                report.nvidia_trees.append(dirpath)
            for name in filenames:
                full = Path(dirpath, name)
                if full.is_symlink() or not elf.is_elf(full):
                    continue
                info = elf.read_elf(full)
                for pattern in CUDA_SONAMES:
                    if info.soname and fnmatch.fnmatchcase(info.soname, pattern):
                        report.sonames[info.soname].add(root)
                if not info.has_dynamic:
                    continue
                report.elf_files += 1
                search = [_expand(e, full.parent) for e in (info.runpath or info.rpath)]
                for lib in info.needed:
                    report.needed += 1
                    hit = next((os.path.join(d, lib) for d in search if os.path.exists(os.path.join(d, lib))), None)
                    if hit is not None:
                        owner = _store_path_of(os.path.realpath(hit), store_dir)
                        if owner in closure:
                            continue
                        if lib == "libcuda.so.1" and os.path.dirname(hit) == driver_dir:
                            continue
                        report.outside.append(f"{full}: {lib} -> {hit}")
                        continue
                    if lib == "libcuda.so.1" and driver_dir in search:  # the driver's, at run time
                        report.to_driver.append(os.fspath(full))
                        continue
                    if any(fnmatch.fnmatchcase(lib, p) for p in HOST_LIBS) and any(
                            os.path.exists(os.path.join(d, lib)) for d in SYSTEM_DIRS):
                        continue
                    report.unresolved.append(f"{full}: {lib}")
    return report
