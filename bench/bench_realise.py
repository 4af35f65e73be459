"""Benchmark realising one redist tarball against `tar -xJf` of it plus patchelf over its ELF files.

    python bench/bench_realise.py                 # synthetic cuda_cupti from /usr/local/cuda, 5 runs
    python bench/bench_realise.py -r 3 --archive cuda_cupti-linux-x86_64-13.0.85-archive.tar.xz
    python bench/bench_realise.py --tiny          # one run (CI); gcc-built libraries without a CUDA prefix

The archive is NVIDIA-shaped (``<name>-archive/`` on top, xz preset 6, one
stream as NVIDIA's are). Without ``--archive`` it is a cuda_cupti 13.0.85 built
from the CUDA prefix's CUPTI/nvperf libraries and headers (plus a static
library and samples, which the real one has); where the prefix has no CUPTI
(CI), the same file names hold small gcc-built shared libraries. Rows, each run on a fresh
directory or an emptied store (not timed), side by side in one process:

* tar + patchelf: ``tar -xJf`` into a fresh dir, then ``patchelf --set-rpath``
  once per ELF file with the RUNPATH the builder computes (known in advance);
* cudapkgs realise: `realise` of the cuda_cupti derivation with the archive
  already in the store's download cache (sha256 checked again), i.e. unpack,
  split, fixup, checks, NAR hash, reference scan and registration;
* cudapkgs realise, cold: the same with an empty download cache (the archive
  copied from a local mirror directory), for information.

Prints a Markdown table of medians (min–max), the ratio to the first row, and
the median time of each builder step. The budget is realise ≤ 1.3 × tar + patchelf.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

import cudapkgs  # noqa: E402
from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf  # noqa: E402
from cudapkgs.realise import redist_source  # noqa: E402
from cudapkgs.realise.realise import realise  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402

PNAME, VERSION, SET = "cuda_cupti", "13.0.85", "cudaPackages_13_0"
NAME = f"{PNAME}-linux-x86_64-{VERSION}-archive"
DRIVER = "/run/opengl-driver/lib"


def gcc_prefix(prefix: Path) -> Path:
    """A stand-in CUDA prefix: the CUPTI file names as small gcc-built libraries (for machines without CUDA)."""
    from elf_builders import BAR_C, STATIC_C, shared_lib, static_lib

    (prefix / "lib").mkdir(parents=True)
    (prefix / "include").mkdir()
    for name in ("libcupti.so.13", "libnvperf_host.so", "libnvperf_target.so", "libpcsamplingutil.so", "libcheckpoint.so"):
        shared_lib(prefix / "lib" / name, BAR_C, name)
    static_lib(prefix / "lib" / "libcudart_static.a", STATIC_C)
    for header in ("cupti.h", "nvperf_host.h", "generated_nvtx_meta.h"):
        (prefix / "include" / header).write_text(f"/* {header} */\n")
    return prefix


def synthetic_archive(prefix: Path, dest: Path) -> Path:
    """cuda_cupti-shaped .tar.xz from the CUPTI parts of a CUDA prefix (a gcc-built stand-in if it has none)."""
    with tempfile.TemporaryDirectory() as tmp:
        if not (prefix / "lib" / "libcupti.so.13").exists():
            prefix = gcc_prefix(Path(tmp) / "prefix")
        root = Path(tmp) / NAME
        (root / "lib").mkdir(parents=True)
        (root / "include").mkdir()
        for name in ("libcupti.so.13", "libnvperf_host.so", "libnvperf_target.so", "libpcsamplingutil.so",
                     "libcheckpoint.so"):
            shutil.copy2(prefix / "lib" / name, root / "lib" / (f"{name}.{VERSION}" if name.endswith(".13") else name))
        (root / "lib" / "libcupti.so.13").symlink_to(f"libcupti.so.13.{VERSION}")
        (root / "lib" / "libcupti.so").symlink_to("libcupti.so.13")
        shutil.copy2(prefix / "lib" / "libcudart_static.a", root / "lib" / "libcupti_static.a")
        for header in (prefix / "include").iterdir():
            if header.name.startswith(("cupti", "nvperf", "generated_nvtx")) and header.is_file():
                shutil.copy2(header, root / "include" / header.name)
        (root / "samples" / "callback_event").mkdir(parents=True)
        (root / "samples" / "callback_event" / "Makefile").write_text("all:\n\t$(NVCC) callback_event.cu\n")
        (root / "LICENSE").write_text("NVIDIA license\n")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with lzma.open(dest, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
            tar.add(root, arcname=NAME)
    return dest


def write_manifest(directory: Path, archive: Path) -> Path:
    data = archive.read_bytes()
    entry = {
        "relative_path": f"{PNAME}/linux-x86_64/{archive.name}",
        "sha256": hashlib.sha256(data).hexdigest(),
        "md5": hashlib.md5(data).hexdigest(),
        "size": str(len(data)),
    }
    manifest = {"release_label": "13.0.3", "release_product": "cuda",
                PNAME: {"name": "CUPTI", "license": "CUDA Toolkit", "version": VERSION, "linux-x86_64": entry}}
    (directory / "cuda").mkdir(parents=True, exist_ok=True)
    (directory / "cuda" / "redistrib_13.0.3.json").write_text(json.dumps(manifest))
    return directory


def tar_and_patchelf(archive: Path, work: Path) -> float:
    dest = work / "tar"
    dest.mkdir()
    start = time.perf_counter()
    subprocess.run(["tar", "-xJf", os.fspath(archive), "-C", os.fspath(dest)], check=True)
    patchelf = elf_patch.patchelf_binary()
    for path in elf.iter_elf_files(dest):
        subprocess.run([patchelf, "--set-rpath", f"$ORIGIN:{DRIVER}", os.fspath(path)], check=True)
    took = time.perf_counter() - start
    shutil.rmtree(dest)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-r", "--runs", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="one run: the CI smoke test of this script")
    parser.add_argument("--archive", type=Path, help=f"a real {NAME}.tar.xz (default: build a synthetic one)")
    parser.add_argument("--prefix", type=Path, default=Path("/usr/local/cuda"))
    args = parser.parse_args()
    if args.tiny:
        args.runs = 1

    with tempfile.TemporaryDirectory(prefix="bench-realise-") as tmp:
        work = Path(tmp)
        mirror = work / "mirror"
        archive = mirror / "cuda" / "redist" / PNAME / "linux-x86_64" / f"{NAME}.tar.xz"
        if args.archive:
            archive.parent.mkdir(parents=True)
            shutil.copy2(args.archive, archive)
        else:
            synthetic_archive(args.prefix, archive)
        os.environ["XDG_CACHE_HOME"] = os.fspath(work / "cache")
        config = {"allowUnfree": True, "manifestsDir": os.fspath(write_manifest(work / "manifests", archive)),
                  "storeDir": os.fspath(work / "store"), "fetchers": [f"mirror:{mirror}"], "driverLibDir": DRIVER}
        drv = cudapkgs.import_pkgs(config=config, system="x86_64-linux")[SET][PNAME].derivation
        elves = 0
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
        unpacked = sum(m.size for m in members if m.isreg())
        compressed = archive.stat().st_size

        rows: dict[str, list[float]] = {"tar -xJf + patchelf per ELF file": [], "cudapkgs realise": [],
                                        "cudapkgs realise, cold download cache": []}
        steps: dict[str, list[float]] = {}
        for run in range(args.runs):
            rows["tar -xJf + patchelf per ELF file"].append(tar_and_patchelf(archive, work))
            for cold in (False, True):
                # A Store that realised something keeps its outputs alive (temporary GC roots)
                # until it is closed: collect with a fresh one, realise with another.
                with Store.open(work / "store") as store:
                    store.gc()
                    if store.all_paths():
                        raise SystemExit(f"gc left {len(store.all_paths())} path(s) in the store: not a fresh store")
                    if cold:
                        shutil.rmtree(redist_source.download_dir(store.store_dir, drv.data["src"]["sha256"]), ignore_errors=True)
                with Store.open(work / "store") as store:
                    marks: list[tuple[str, float]] = []
                    start = time.perf_counter()
                    realise(store, [drv], on_step=lambda name: marks.append((name, time.perf_counter())))
                    end = time.perf_counter()
                rows["cudapkgs realise" + (", cold download cache" if cold else "")].append(end - start)
                if not cold and run == 0:
                    elves = sum(1 for o in drv.outputs.values() for _ in elf.iter_elf_files(o))
                if not cold:
                    steps.setdefault("(before fetch: plan, locks)", []).append(marks[0][1] - start)
                    for (name, t0), (_, t1) in zip(marks, [*marks[1:], ("end", end)]):
                        steps.setdefault(name, []).append(t1 - t0)
        for dirpath, _, _ in os.walk(work / "store"):  # store paths are read-only
            os.chmod(dirpath, 0o755)

    base = statistics.median(rows["tar -xJf + patchelf per ELF file"])
    print(f"{archive.name}: {compressed / 2**20:.1f} MiB, {unpacked / 2**20:.1f} MiB unpacked, "
          f"{len(members)} members, {elves} ELF files; {args.runs} runs, python {sys.version.split()[0]}\n")
    print("| | median s | min–max s | ratio |\n|---|---|---|---|")
    for name, times in rows.items():
        med = statistics.median(times)
        print(f"| {name} | {med:.3f} | {min(times):.3f}–{max(times):.3f} | {med / base:.2f} |")
    print("\n| cudapkgs realise step | median s |\n|---|---|")
    for name, times in steps.items():
        print(f"| {name} | {statistics.median(times):.3f} |")
    print(f"\n(the last step, {list(steps)[-1]}, is timed until realise returns: it includes the store's NAR hash, "
          "reference scan, and the rename and registration of the outputs)")


if __name__ == "__main__":
    main()
