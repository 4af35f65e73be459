"""Build a torch.utils.cpp_extension CUDA kernel in `cudapkgs shell` and pack what the GPU needs to run it.

usage: python bench/device/pack_torch_extension.py [--store DIR] [--out build/torch-ext] [--piece-mib 48]
           [--capability 9.0] [--set KEY=VALUE ...]

Runs here (no GPU): enters a shell of the CUDA 13.0 set's torch and toolkit (the packages of
tests/pkgs/test_torch_shell_builds.py, cudaCapabilities = [--capability]), with its GC root at
OUT/shell-root and its venv at OUT/venv, and there runs ``pip install --no-build-isolation --no-deps``
of tests/data/torch_builds/extension (an ``axpy`` kernel: out = a*x + y on float32 CUDA tensors).
Then writes into OUT:

* ``ext/axpy_ext….so``: the built extension (its RUNPATH: torch's ``torch/lib`` and cudart's output);
* ``env.json``: the store's python3, the store's site-packages the shell layered on, the store dir;
* ``closure.txt``: every store path the shell needs (the closure of its ``shell-env`` root);
* ``closure.tar.000``, ``…001``, …: that closure as one tar (absolute paths, no compression) cut into
  pieces of --piece-mib MiB, and ``pieces.sha256`` (``sha256sum -c`` checks them).

On the GPU machine (same store directory; the interpreter torch was pinned for, CPython 3.11 here):
``cat closure.tar.* | tar -x -C /`` then ``python3 bench/device/check_torch_extension.py OUT``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SET = "cudaPackages_13_0"
ML = ("torchvision", "torchaudio", "onnxruntime", "onnx", "jax", "jax-cuda13-plugin", "cupy", "numpy")
PACKAGES = [f"{SET}.pkgs.pkgsCuda.python3Packages.torch"] + [
    f"{SET}.{name}" for name in ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "libcublas", "libcusparse", "libcurand",
                                 "libcusolver", "libcufft", "cuda_nvrtc", "cuda_nvtx")]


class _Pieces:
    """A write-only file that cuts what is written into OUT/closure.tar.NNN pieces of `size` bytes."""

    def __init__(self, out: Path, size: int) -> None:
        self.out, self.size, self.index, self.left, self.handle = out, size, -1, 0, None
        self.names: list[Path] = []

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self.left == 0:
                self._next()
            n = min(self.left, len(view))
            self.handle.write(view[:n])
            self.left -= n
            view = view[n:]
        return len(data)

    def _next(self) -> None:
        if self.handle:
            self.handle.close()
        self.index += 1
        path = self.out / f"closure.tar.{self.index:03d}"
        self.names.append(path)
        self.handle = open(path, "xb")
        self.left = self.size

    def close(self) -> None:
        if self.handle:
            self.handle.close()


def pth_directories(text: str) -> list[str]:
    """The directories a ``.pth`` file adds to ``sys.path``, in order: its lines except blank ones, comments and
    lines starting with ``import`` followed by a space or tab, which Python runs as code (the shell venv's
    byte-code guard). Source: CPython's ``site.addpackage`` (Lib/site.py, 3.12)."""
    return [line.rstrip() for line in text.splitlines()
            if line.strip() and not line.startswith(("#", "import ", "import\t"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="the store (default: cudapkgs' default store)")
    parser.add_argument("--out", default="build/torch-ext")
    parser.add_argument("--piece-mib", type=int, default=48)
    parser.add_argument("--capability", default="9.0", help="the set's cudaCapabilities (the H200: 9.0)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more configuration")
    parser.add_argument("--python", default="python3", help="the scope: python3 or python3XX (python312: the GPU's)")
    parser.add_argument("--with-ml", action="store_true",
                        help="also torchvision, torchaudio, onnxruntime, onnx, jax, its CUDA plugin, cupy, numpy in the shell")
    parser.add_argument("--no-pieces", action="store_true",
                        help="no closure.tar pieces (the shell root goes to pack_closure.py with the other roots)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    src = out / "src"
    shutil.copytree(ROOT / "tests" / "data" / "torch_builds" / "extension", src)
    env = dict(os.environ)
    if args.store:
        env["CUDAPKGS_STORE"] = args.store
    env.setdefault("CUDAPKGS_SOURCE_MIRRORS", str(ROOT.parent / "shared" / "sources"))
    config = ["--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', "--set", 'prebuiltWheels=["nccl","libnvshmem"]',
              "--set", f'cudaCapabilities=["{args.capability}"]']
    for extra in args.set:
        config += ["--set", extra]
    # The store's python3: the first on the shell's PATH after the venv's bin.
    probe = ("import json, os, shutil; venv = os.path.join(os.environ['VIRTUAL_ENV'], 'bin'); "
             "path = os.pathsep.join(e for e in os.environ['PATH'].split(os.pathsep) if e != venv); "
             "print(json.dumps({'python': shutil.which('python3', path=path), 'store': os.environ['NIX_STORE']}))")
    script = f"pip install --no-build-isolation --no-deps --disable-pip-version-check . && python3 -c \"{probe}\""
    packages = [p.replace(".python3Packages.", f".{args.python}Packages.") for p in PACKAGES]
    if args.with_ml:
        packages += [f"{SET}.pkgs.pkgsCuda.{args.python}Packages.{name}" for name in ML]
    run = subprocess.run([sys.executable, "-m", "cudapkgs", "shell", *config, "--profile", str(out / "shell-root"),
                          "--venv", str(out / "venv"), *packages, "--command", "sh", "-c", script],
                         cwd=src, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n", file=sys.stderr)
        return 1
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    site = out / "venv" / "lib"
    built = sorted(site.glob("python3.*/site-packages/axpy_ext*.so"))
    pth = sorted(site.glob("python3.*/site-packages/cudapkgs-shell.pth"))
    (out / "ext").mkdir()
    shutil.copy2(built[0], out / "ext" / built[0].name)
    facts["site"] = pth_directories(pth[0].read_text())
    facts["ext"] = "ext"
    (out / "env.json").write_text(json.dumps(facts, indent=2) + "\n")
    closure = subprocess.run([sys.executable, "-m", "cudapkgs", "path-info", "-r", str(out / "shell-root")],
                             env=env, capture_output=True, text=True, check=True).stdout.split()
    (out / "closure.txt").write_text("".join(f"{p}\n" for p in closure))
    (out / "packages.txt").write_text("".join(f"{p}\n" for p in packages))
    (out / "config.txt").write_text("".join(f"{c}\n" for c in config if c != "--set"))
    if args.no_pieces:
        print(json.dumps({"out": str(out), "extension": built[0].name, "closure_paths": len(closure),
                          "root": os.path.realpath(out / "shell-root"), "python": facts["python"]}))
        return 0
    pieces = _Pieces(out, args.piece_mib << 20)
    with tarfile.open(fileobj=pieces, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in closure:
            tar.add(path, recursive=True)
    pieces.close()
    sums = []
    for piece in pieces.names:
        digest = hashlib.sha256(piece.read_bytes()).hexdigest()
        sums.append(f"{digest}  {piece.name}\n")
    (out / "pieces.sha256").write_text("".join(sums))
    print(json.dumps({"out": str(out), "extension": built[0].name, "closure_paths": len(closure),
                      "pieces": len(pieces.names), "python": facts["python"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
