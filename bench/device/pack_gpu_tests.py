"""Realise here what the GPU machine's `cudapkgs test` runs need and cannot make itself; name what it builds.

usage: python bench/device/pack_gpu_tests.py --store DIR [--roots FILE] [--wheels DIR] [--gcc 13.3.0]
                                             [--early PREFIX --early-roots FILE] [--jobs 2] [--dry-run]
                                             [ATTRPATH ...]

The GPU machine evaluates with its own host compiler (Ubuntu 24.04's GCC 13.3; this machine has Debian's
12.2). What compiles nothing names no compiler (tests/pkgs/test_host_compiler_portability.py), so those
derivations have the same store paths on both machines and can be built here and carried; what compiles
(cuda_nvcc, whose nvcc.profile names the host compiler; OpenCV; the gcc-wrapper; the tests that run nvcc)
gets other paths there and is built there, offline, from carried inputs.

This script evaluates every test and tester of ATTRPATHs (default `TARGETS`: the GPU tests of issue 35 and
issue 31's item 6, and OpenCV with the set's torch of issue 33) twice in one process: once with a stand-in
GCC ``--gcc`` (first on PATH and as CC/CXX: scripts answering ``-dM -E`` as GCC does, the portability test's
way) and once with this machine's compiler. A derivation whose ``.drv`` path is the same under both is
*portable*: it is realised here (``--store``, `cudapkgs.realise.scheduler.realise_parallel`) and its outputs
written to ``--roots`` (one per line, for pack_closure.py). A derivation seen only under the stand-in is
built on the device; where it is a buildRedist component, the NVIDIA wheel it unpacks (``fetchers =
["wheels"]``) is copied with its ``.sha256`` record into ``--wheels`` (the device's wheel cache, where
`cudapkgs.fetch.wheel_lookup.cached_wheel` finds it with no network). Prints a summary: the portable
derivations (and how many were built now), the device-built ones by name, the wheels.

The configuration is `CONFIG` (the ML environment's of build_ml_env.py, plus the carried CPython 3.12.1 as
``python3Executable`` and default_cuda_13_0.py as an overlay: the "with-default-cuda" testers of
``cudaPackages.tests.opencv-and-torch`` take their packages from the default set, CUDA 13.0 there).
Exits 1, naming it, when a device-built buildRedist component has no NVIDIA wheel (the device could not
fetch it) or a wheel is not in this machine's wheel cache and cannot be downloaded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = "/root/.pyenv/versions/3.12.1/bin/python3.12"
ML = "cudaPackages_13_0.pkgs.pkgsCuda.python312Packages."
TARGETS = [
    "cudaPackages_13_0.tests.nvcc-runtime",
    "cudaPackages_13_0.tests.opencv-and-torch",
    *(ML + name for name in ("torch", "torchvision", "torchaudio", "onnxruntime", "jax-cuda13-plugin", "cupy")),
]
# One Python with the set's opencv4 (CUDA) and torch, as the opencv-and-torch testers pair them, for the
# /proc/self/maps check (check_opencv_torch.py): an attribute of opencv_packages.py.
EXTRA = ["cudaPackages_13_0.pkgs.pkgsCuda.opencv_gpu_torch_env", "cudaPackages_13_0.pkgs.pkgsCuda.opencv4_torch_env"]


def config(store: str) -> dict:
    """The configuration of every evaluation here and on the device (but the host compiler)."""
    return {"allowUnfree": True, "fetchers": ["wheels"], "storeDir": store, "prebuiltWheels": ["nccl", "libnvshmem"],
            "cudaCapabilities": ["9.0"], "python3Executable": PYTHON,
            "overlays": [str(HERE / "default_cuda_13_0.py")]}


def fake_gcc(directory: Path, version: str) -> Path:
    """gcc, g++, cc and c++ scripts answering ``-dM -E`` as GCC `version` does (nothing else is asked at
    evaluation)."""
    directory.mkdir(parents=True, exist_ok=True)
    body = f"#!/bin/sh\necho '#define __GNUC__ {version.split('.')[0]}'\necho '#define __VERSION__ \"{version}\"'\n"
    for name in ("gcc", "g++", "cc", "c++"):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory


def closures(cfg: dict, targets: list[str], extra: list[str]) -> dict[str, object]:
    """``{drv path: Derivation}`` of every test, tester and extra attribute's closure under `cfg` and the
    host compiler the environment names now."""
    import cudapkgs
    from cudapkgs import top_level
    from cudapkgs.host import compiler as host_compiler
    from cudapkgs.lib.attrpath import parse_attrpath, resolve
    from cudapkgs.testers import _collect
    from cudapkgs.user_files import package_file_overlay

    top_level.clear_cache()
    host_compiler._find.cache_clear()
    pkgs = cudapkgs.import_pkgs(config=cfg, overlays=[package_file_overlay([str(HERE / "opencv_packages.py")])])
    found: dict[str, object] = {}
    wanted = [test.derivation for _, test, reason in _collect(pkgs, targets) if reason is None]
    wanted += [resolve(pkgs, parse_attrpath(attr)).derivation for attr in extra]
    for drv in wanted:
        for d in drv.closure():
            found.setdefault(d.drv_path, d)
    return found


def redist_wheel(drv) -> tuple[str, str]:
    """NVIDIA's ``(project, version)`` wheel a buildRedist derivation unpacks; FetchError where none exists."""
    from cudapkgs.errors import FetchError
    from cudapkgs.fetch.wheel_lookup import wheel_for

    attrs = drv.attrs
    found = wheel_for(attrs["redistName"], attrs["pname"], int(attrs["cudaMajorMinorVersion"].split(".")[0]),
                      attrs["version"])
    if found is None:
        raise FetchError(f"{drv.name}: NVIDIA publishes no wheel of it; the device could not fetch it")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=TARGETS)
    parser.add_argument("--store", required=True)
    parser.add_argument("--roots", type=Path, default=None, help="write the portable outputs here, one a line")
    parser.add_argument("--wheels", type=Path, default=None, help="copy the device-built components' wheels here")
    parser.add_argument("--early", default=None, metavar="PREFIX",
                        help="also write --early-roots: the portable inputs of the device-built derivations whose "
                        "name starts with PREFIX (e.g. opencv-: carried first, so that their build starts early)")
    parser.add_argument("--early-roots", type=Path, default=None)
    parser.add_argument("--gcc", default="13.3.0", help="the device's GCC version (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="say what would be built here; build nothing")
    args = parser.parse_args(argv)

    from cudapkgs.errors import CudapkgsError
    from cudapkgs.fetch.wheel_lookup import cached_wheel
    from cudapkgs.fetch.wheels import WheelSource
    from cudapkgs.realise.scheduler import realise_parallel
    from cudapkgs.store.store import Store

    cfg = config(args.store)
    saved = {k: os.environ.get(k) for k in ("CC", "CXX", "PATH")}
    with tempfile.TemporaryDirectory(prefix="device-gcc-") as scratch:
        bin_dir = fake_gcc(Path(scratch), args.gcc)
        os.environ.update(CC=str(bin_dir / "gcc"), CXX=str(bin_dir / "g++"),
                          PATH=f"{bin_dir}{os.pathsep}{saved['PATH'] or os.defpath}")
        try:
            device = closures(cfg, args.targets, EXTRA)
        finally:
            for key, value in saved.items():
                os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    here = closures(cfg, args.targets, EXTRA)
    portable = [d for p, d in device.items() if p in here]
    built_there = sorted((d for p, d in device.items() if p not in here), key=lambda d: d.name)
    try:
        wheels = sorted({redist_wheel(d) for d in built_there if d.builder == "buildRedist"})
    except CudapkgsError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"{len(device)} derivations; {len(portable)} portable (built here and carried), "
          f"{len(built_there)} built on the device:")
    for d in built_there:
        print(f"  {d.name}")
    print("wheels for the device's builds: " + (", ".join(f"{p}=={v}" for p, v in wheels) or "none"))
    if args.dry_run:
        return 0
    with Store.open(args.store) as store:
        missing = [d for d in portable if not all(store.is_valid(o) for o in d.outputs.values())]
        print(f"building {len(missing)} portable derivation(s) here")
        if missing:
            realise_parallel(store, missing, jobs=args.jobs)
    outputs = sorted({o for d in portable for o in d.outputs.values()})
    if args.roots:
        args.roots.write_text("".join(f"{o}\n" for o in outputs))
        print(f"{len(outputs)} portable outputs written to {args.roots}")
    if args.early and args.early_roots:
        early = {p for d in built_there if d.name.startswith(args.early) for p in (x.drv_path for x in d.closure())}
        first = sorted({o for d in portable if d.drv_path in early for o in d.outputs.values()})
        args.early_roots.write_text("".join(f"{o}\n" for o in first))
        print(f"{len(first)} of them inputs of {args.early}*: written to {args.early_roots}")
    if args.wheels:
        args.wheels.mkdir(parents=True, exist_ok=True)
        for project, version in wheels:
            wheel = cached_wheel(project, version, "x86_64") or WheelSource().download_wheel(project, version, "x86_64")
            shutil.copyfile(wheel, args.wheels / wheel.name)
            shutil.copyfile(wheel.with_name(wheel.name + ".sha256"), args.wheels / (wheel.name + ".sha256"))
            print(f"carried wheel {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
