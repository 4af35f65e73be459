"""The RUNPATH fix-up of one wheel's ELF files: in-process (`cudapkgs.elf.edit.set_runpath`) against patchelf.

Run:  python bench/bench_runpath_edit.py WHEEL [WHEEL ...] [--runs 5]

Unpacks each wheel's shared libraries (``*.so*``) once into a scratch directory, then, each run
and alternating which goes first, copies them fresh and gives every copy the same RUNPATH with
`set_runpath` (the edit `cudapkgs.hooks.fixup` tries first) or with one ``patchelf --set-rpath``
per file (what the fix-up falls back to when the edit declines). Prints the files each way
handles, the median wall and CPU seconds of each (CPU: this process's own time for the
in-process edit, patchelf's children's time plus ours for patchelf), their ratio and the load
average (/proc/loadavg) before and after. The copies are written before the clock starts, so
the figures are the edit alone; page-cache effects are the same for both (fresh copies each run).
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


def main(argv: list[str] | None = None) -> int:
    from cudapkgs.elf import edit, patch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("-r", "--runs", type=int, default=5)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-runpath-"))
    try:
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
          f"load average before {' '.join(before)}, after {' '.join(after)}")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    for k, (w, c) in med.items():
        print(f"{k}: wall median {w:.3f} s, CPU median {c:.3f} s")
    print(f"in-process / patchelf: wall {med['in-process'][0] / med['patchelf'][0]:.3f}, "
          f"CPU {med['in-process'][1] / med['patchelf'][1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
