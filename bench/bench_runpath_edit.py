"""The RUNPATH fix-up of one wheel's ELF files: in-process (`cudapkgs.elf.edit.set_runpath`) against patchelf.

Run:  python bench/bench_runpath_edit.py WHEEL [WHEEL ...] [--runs 5]
      python bench/bench_runpath_edit.py --tiny     (one synthetic wheel, one run: tests/test_benches.py; needs gcc)

Unpacks each wheel's shared libraries (``*.so*``) once into a scratch directory, then, each run
and alternating which goes first, copies them fresh and gives every copy the same RUNPATH with
`set_runpath` (the edit `cudapkgs.hooks.fixup` tries first) or with one ``patchelf --set-rpath``
per file (what the fix-up falls back to when the edit declines). Prints the files each way
handles, the median wall and CPU seconds of each (CPU: this process's own time for the
in-process edit, patchelf's children's time plus ours for patchelf), their ratio and the load
average (/proc/loadavg) before and after. The copies are written before the clock starts, so
the figures are the edit alone; page-cache effects are the same for both (fresh copies each run).

Tiny mode: a wheel holding one gcc-built library whose program headers are followed by patchelf's
``X`` fill (as cuDNN's are), one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _tiny_wheel(scratch: Path) -> Path:
    """A wheel with one library laid out as cuDNN's: ``X`` bytes right after the program headers."""
    import struct

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from elf_builders import FOO_C, shared_lib

    lib = shared_lib(scratch / "build" / "libfoo.so", FOO_C, "libfoo.so",
                     "-Wl,--section-start=.note.gnu.build-id=0x400")
    data = bytearray(lib.read_bytes())
    phnum, = struct.unpack_from("<H", data, 0x38)
    start = 64 + 56 * phnum
    if data[start:0x400].strip(b"\0"):
        raise SystemExit("the linker left no gap after the program headers")
    data[start:0x400] = b"X" * (0x400 - start)
    wheel = scratch / "tiny-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tiny/lib/libfoo.so", bytes(data))
    return wheel


def main(argv: list[str] | None = None) -> int:
    from cudapkgs.elf import edit, patch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheels", nargs="*", type=Path)
    parser.add_argument("-r", "--runs", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="one synthetic wheel, one run: the CI smoke test")
    args = parser.parse_args(argv)
    if not args.tiny and not args.wheels:
        parser.error("name at least one wheel (or --tiny)")
    scratch = Path(tempfile.mkdtemp(prefix="bench-runpath-"))
    try:
        if args.tiny:
            args.wheels, args.runs = [_tiny_wheel(scratch)], 1
        originals = []
        for wheel in args.wheels:
            with zipfile.ZipFile(wheel) as archive:
                for info in archive.infolist():
                    name = info.filename.rsplit("/", 1)[-1]
                    if ".so" in name and not info.is_dir():
                        target = scratch / "orig" / f"{len(originals)}-{name}"
                        target.parent.mkdir(exist_ok=True)
                        with archive.open(info) as src, open(target, "wb") as out:
                            shutil.copyfileobj(src, out, 1 << 20)
                        originals.append(target)
        runpath = ["/nix/store/00000000000000000000000000000000-x-lib/lib", "/run/opengl-driver/lib"]
        patchelf = patch.patchelf_binary()
        times: dict[str, list[tuple[float, float]]] = {"in-process": [], "patchelf": []}
        handled = 0
        before = open("/proc/loadavg").read().split()[:3]
        for i in range(args.runs):
            for way in (["in-process", "patchelf"] if i % 2 == 0 else ["patchelf", "in-process"]):
                work = scratch / f"run-{i}-{way}"
                work.mkdir()
                copies = [Path(shutil.copy2(p, work / p.name)) for p in originals]
                os.sync()
                wall0, cpu0 = time.perf_counter(), _cpu()
                if way == "in-process":
                    done = [edit.set_runpath(p, runpath) for p in copies]
                    for p, ok in zip(copies, done):
                        if not ok:
                            subprocess.run([patchelf, "--set-rpath", ":".join(runpath), str(p)], check=True)
                    handled = sum(done)
                else:
                    for p in copies:
                        subprocess.run([patchelf, "--set-rpath", ":".join(runpath), str(p)], check=True)
                times[way].append((time.perf_counter() - wall0, _cpu() - cpu0))
                shutil.rmtree(work)
        after = open("/proc/loadavg").read().split()[:3]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(originals)} ELF files; in-process edit handled {handled}, the rest by patchelf; runs: {args.runs}; "
          f"load average before {' '.join(before)}, after {' '.join(after)}\n")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    print("| way | median wall s | median CPU s | wall × patchelf | CPU × patchelf |")
    print("|---|---:|---:|---:|---:|")
    for k, (w, c) in med.items():
        print(f"| {k} | {w:.3f} | {c:.3f} | {w / med['patchelf'][0]:.3f} | {c / max(med['patchelf'][1], 1e-9):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
