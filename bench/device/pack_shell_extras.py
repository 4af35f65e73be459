"""Pack what `cudapkgs shell` on the lent GPU needs beside the store closure, in two device calls.

usage: python bench/device/pack_shell_extras.py (--ext OUT | --shell DIR) [--repo /work/main] [--name ml]
           [--cache-wheel GLOB ...] [--wheel-cache DIR]

OUT is what ``pack_torch_extension.py --no-pieces`` wrote (the extension, ``env.json``, ``closure.txt``, the
shell's ``packages.txt`` and ``config.txt``). Writes, under ``<repo>/.carry/NAME/``:

* ``extra-a/``: ``cpython-3.12.1.tar.gz`` (pyenv's tree the closure's ``bin/python3`` links to, without
  test/, idlelib, tkinter, ensurepip, ``__pycache__``: pack_onnx.py's filter; about 41 MB) and ``torch-ext/``
  (the extension, about 12 MB, and the text files above);
* ``extra-b/``: ``wheels/`` (cudapkgs' own dependencies for the device's Python 3.12, as
  ``pack_closure.py --wheels``; about 14 MB) and ``cache/cudapkgs/wheels/``: the wheels named by
  ``--cache-wheel`` (globs in the wheel cache, default ``nvidia_cuda_nvcc-13.0.88-*.whl``) with their
  ``.sha256`` records, about 37 MB.

Why the nvcc wheel: a shell evaluated with another host compiler (the device's GCC 13.3, this machine's 12.2)
gets another ``cuda_nvcc`` (its nvcc.profile names the host compiler: tests/pkgs/test_host_compiler_portability.py)
and builds it from NVIDIA's wheel; with no network there, that wheel must be in the wheel cache
(``$XDG_CACHE_HOME/cudapkgs/wheels``, `cudapkgs.fetch.wheel_lookup.wheel_cache_directory`). The cache trusts
the ``.sha256`` record beside a wheel (pip's check, here), and the unpacker refuses bytes that differ from it.

With ``--shell DIR`` instead of ``--ext`` (a smaller proof: a folder holding only the shell's
``packages.txt`` and ``config.txt``), ``extra-a`` holds the CPython tree, ``shell/`` and ``wheels/``, and
``extra-b`` is made only for ``--cache-wheel`` (none by default: a shell without cuda_nvcc rebuilds only its
gcc-wrapper).

Each folder stays under the device tool's 64 MiB a call with /work/main's ~8 MB working tree; this script
exits 1 naming a folder that does not. On the device: ``bash bench/device/stash_extra.sh NAME extra-a``
(carry ``.carry/NAME/extra-a``), then the same with ``extra-b``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from pack_closure import DEVICE_WHEELS  # noqa: E402
from pack_onnx import PYENV, _keep  # noqa: E402

LIMIT = 64 << 20  # the device tool's bytes a call
TREE = 9 << 20  # /work/main's working tree, rounded up


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--ext", type=Path, help="pack_torch_extension.py's --out")
    what.add_argument("--shell", type=Path, help="a folder with the shell's packages.txt and config.txt only")
    parser.add_argument("--repo", type=Path, default=Path("/work/main"), help="the checkout the device tool sends")
    parser.add_argument("--name", default="ml")
    parser.add_argument("--cache-wheel", action="append", default=None, metavar="GLOB",
                        help="wheels the shell builds from there (default: nvidia_cuda_nvcc-13.0.88-*.whl)")
    parser.add_argument("--wheel-cache", type=Path, default=None, help="default: cudapkgs' wheel cache")
    args = parser.parse_args(argv)

    from cudapkgs.fetch.wheel_lookup import wheel_cache_directory

    carry = args.repo / ".carry" / args.name
    a, b = carry / "extra-a", carry / "extra-b"
    for folder in (a, b):
        if folder.exists():
            shutil.rmtree(folder)
    if args.ext:
        ext = a / "torch-ext"
        (ext / "ext").mkdir(parents=True)
        for name in ("env.json", "closure.txt", "packages.txt", "config.txt"):
            shutil.copy2(args.ext / name, ext / name)
        for built in (args.ext / "ext").glob("*.so"):
            shutil.copy2(built, ext / "ext" / built.name)
    else:
        (a / "shell").mkdir(parents=True)
        for name in ("packages.txt", "config.txt"):
            shutil.copy2(args.shell / name, a / "shell" / name)
    with tarfile.open(a / "cpython-3.12.1.tar.gz", "w:gz") as tar:
        tar.add(PYENV, arcname=str(PYENV).lstrip("/"), filter=_keep)

    cache = args.wheel_cache or wheel_cache_directory()
    dest = b / "cache" / "cudapkgs" / "wheels"
    patterns = args.cache_wheel or (["nvidia_cuda_nvcc-13.0.88-*.whl"] if args.ext else [])
    if patterns:
        dest.mkdir(parents=True)
    for pattern in patterns:
        found = sorted(p for p in cache.glob(pattern) if p.suffix == ".whl" and p.is_file() and not p.is_symlink())
        if not found:
            print(f"no wheel {pattern} in {cache}: build the shell here once (it fetches it)", file=sys.stderr)
            return 1
        for wheel in found:
            record = wheel.with_name(wheel.name + ".sha256")
            if not record.is_file():
                print(f"{wheel} has no .sha256 record (pip's check): fetch it again", file=sys.stderr)
                return 1
            shutil.copy2(wheel, dest / wheel.name)
            shutil.copy2(record, dest / record.name)
    wheels = (b if args.ext else a) / "wheels"
    wheels.mkdir(parents=True)
    subprocess.run([sys.executable, "-I", "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                    "--platform", "any", "-d", str(wheels), *DEVICE_WHEELS], check=True, cwd=wheels)
    status = 0
    folders = [f for f in (a, b) if f.exists()]
    for folder in folders:
        size = _size(folder)
        print(f"{folder}: {size / 2**20:.1f} MiB")
        if size + TREE > LIMIT:
            print(f"{folder}: {size / 2**20:.1f} MiB with the working tree is over the tool's 64 MiB", file=sys.stderr)
            status = 1
    rel = carry.relative_to(args.repo)
    for folder in folders:
        print(f"device call: bash bench/device/stash_extra.sh {args.name} {folder.name}   (carry {rel}/{folder.name})")
    return status


if __name__ == "__main__":
    sys.exit(main())
