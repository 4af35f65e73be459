"""Checks of a realised closure: where every DT_NEEDED of every ELF file resolves, and which CUDA libraries it holds.

Used by the opt-in closure tests (test_torch_closure.py, test_companions_closure.py,
test_jax_cupy_closure.py), with what they share: realising a withPackages env into a test store
(`realised_env`), running it under ``env -i`` (`run_in_env_i`), a stray NVIDIA wheel's tree for
PYTHONPATH (`decoy_path`). The loader's rules, as ld.so(8) states them
for a library with DT_RUNPATH: the library's own RUNPATH (``$ORIGIN`` expanded), then the system's
default directories; no LD_LIBRARY_PATH (the checks run as ``env -i`` would).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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


# --- What the opt-in closure tests share: realising a withPackages env, running it as `env -i` would ---

DRIVER = "/run/opengl-driver/lib"


def ml_test_store(name: str) -> Path:
    """The store a closure test realises into: ``$CUDAPKGS_TEST_ML_STORE_DIR`` when set (one private
    store for every set, e.g. ``/tmp/<you>-store``, deleted after), else the test cache's
    ``cudapkgs/test-stores/NAME`` (kept: a second run only checks)."""
    from conftest import _test_cache_home  # tests/ is on sys.path (rootdir conftest)

    chosen = os.environ.get("CUDAPKGS_TEST_ML_STORE_DIR")
    return Path(chosen) if chosen else _test_cache_home() / "cudapkgs" / "test-stores" / name


@contextmanager
def realised_env(store_dir: Path, set_name: str, packages: Any, python: str = "python3Packages") -> Iterator[tuple]:
    """Realise ``withPackages(packages(ps))`` of `set_name`'s `python` scope (``pkgs.<set>.pkgs.pkgsCuda``) from
    wheels (``fetchers=["wheels"]``, NVIDIA's prebuilt NCCL and NVSHMEM) into `store_dir`, downloads in the
    test cache, sources from ../shared/sources when there. Yields (pkgs, ps, env output path, closure).
    Skips (pytest.skip) when the interpreter is not on this machine (an evaluation error naming it)."""
    from conftest import SHARED, _test_cache_home

    import cudapkgs
    from cudapkgs.errors import CudapkgsError
    from cudapkgs.realise.scheduler import realise_parallel
    from cudapkgs.store.store import Store

    env = {"XDG_CACHE_HOME": os.fspath(_test_cache_home())}
    if (SHARED / "sources").is_dir() and not os.environ.get("CUDAPKGS_SOURCE_MIRRORS"):
        env["CUDAPKGS_SOURCE_MIRRORS"] = os.fspath(SHARED / "sources")  # zlib's archive, hash-checked
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"],
                                            "prebuiltWheels": ["nccl", "libnvshmem"],
                                            "storeDir": os.fspath(store_dir), "driverLibDir": DRIVER})
        try:
            ps = pkgs[set_name].pkgs.pkgsCuda[python]
            env_package = ps.withPackages(packages(ps))
            drv = env_package.derivation
        except CudapkgsError as error:
            if "uv python install" in str(error) or "no interpreter" in str(error).lower():
                pytest.skip(f"{set_name}.{python}: {error}")
            raise
        with Store.open(store_dir) as store:
            realise_parallel(store, [drv], jobs=2)
            closure = store.closure([env_package.out])
        yield pkgs, ps, env_package.out, closure
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def decoy_path(root: Path, closure: list[str], trees: Iterable[tuple[str, str]], packages: bool = False) -> str:
    """A stray NVIDIA wheel's tree under `root` for PYTHONPATH: ``nvidia/<tree>/lib/<soname>`` for each
    (tree, soname), each a copy of the closure's library (so a preload that looked there would load it);
    with `packages`, ``nvidia`` and ``nvidia/<tree>`` are importable packages. Returns the directory."""
    top = root / "decoy"
    for tree, soname in trees:
        lib = top / "nvidia" / tree / "lib"
        lib.mkdir(parents=True, exist_ok=True)
        if packages:
            (lib.parent / "__init__.py").write_text("")
            (top / "nvidia" / "__init__.py").write_text("")
        source = next(Path(p) / "lib" / soname for p in closure if (Path(p) / "lib" / soname).exists())
        shutil.copy(source, lib / soname)
    return os.fspath(top)


def run_in_env_i(python: str, script: str, cwd: Path, pythonpath: str = "", **extra: str) -> dict[str, Any]:
    """Run `script` (written to a file: triton.jit reads its function's source) with the env's
    ``bin/python3`` under ``env -i`` (HOME in `cwd`, PATH=/usr/bin:/bin for inductor's C++ compiler,
    no LD_LIBRARY_PATH, no CUDA_HOME; PYTHONPATH and `extra` only when given); returns the JSON it
    prints. Fails the test with the end of stderr when it exits non-zero."""
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    file = cwd / "check.py"
    file.write_text(script)
    env = ["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", *([f"PYTHONPATH={pythonpath}"] if pythonpath else []),
           *(f"{k}={v}" for k, v in extra.items())]
    done = subprocess.run([*env, f"{python}/bin/python3", os.fspath(file)], capture_output=True, text=True,
                          timeout=900, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def cuda_libraries_mapped(maps: Iterable[str]) -> list[str]:
    """The CUDA libraries (`CUDA_SONAMES`) among the files of a process's /proc/self/maps."""
    return [m for m in maps if any(fnmatch.fnmatchcase(os.path.basename(m), p) for p in CUDA_SONAMES)]


def inside(paths: Iterable[str], closure: Iterable[str]) -> bool:
    """Whether every path lies inside one of the store paths of `closure`."""
    prefixes = tuple(p.rstrip("/") + "/" for p in closure)
    return all(p.startswith(prefixes) for p in paths)
