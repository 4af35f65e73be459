"""Benchmark the RUNPATH fix-up of a tree of N small ELF files against plain patchelf.

    python bench/bench_patchelf.py            # N=200, 5 runs
    python bench/bench_patchelf.py -n 1000 -r 3

The tree is one split redist: N/2 copies of an executable in bin/ and N/2 shared
libraries in lib/, each needing a library of a dependency (gcc builds the
originals).  Rows, each on a fresh copy of the tree (copying not timed):

* patchelf per file: `patchelf --set-rpath <final RUNPATH> f` once per ELF file,
  with the answer known in advance — the floor any fix-up pays with one call per file;
* cudapkgs fixup: `hooks.fixup` (autoPatchelf + driver dir + stubs removal), which
  reads every ELF with pyelftools, resolves DT_NEEDED and writes each result once (in
  process with `cudapkgs.elf.edit` where it can, else one patchelf call per distinct RUNPATH);
* cudapkgs hooks one by one: `auto_patchelf`, `add_driver_runpath` and
  `remove_stubs_from_runpath`, each writing its own result (no shared plan).

Prints a Markdown table of medians (min–max) and the ratio to the first row.
The budget is fixup ≤ 1.3 × patchelf per file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))

from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf  # noqa: E402
from cudapkgs import hooks  # noqa: E402
from elf_builders import APP_C, BAR_C, FOO_C, GCC, executable, shared_lib  # noqa: E402

DRIVER = "/run/opengl-driver/lib"


def build_template(root: Path, n: int) -> tuple[dict[str, Path], Path]:
    """A split package with n ELF files, and its dependency's lib dir."""
    dep = root / "aaaa-cuda12.8-libbar-1.0-lib" / "lib"
    shared_lib(dep / "libbar.so.1", BAR_C, "libbar.so.1")
    (dep / "libbar.so").symlink_to("libbar.so.1")
    pkg = {"out": root / "bbbb-cuda12.8-libfoo-1.0", "bin": root / "bbbb-cuda12.8-libfoo-1.0-bin",
           "lib": root / "bbbb-cuda12.8-libfoo-1.0-lib"}
    pkg["out"].mkdir()
    lib = pkg["lib"] / "lib"
    foo = shared_lib(lib / "libfoo.so.1", FOO_C, "libfoo.so.1", f"-L{dep}", "-lbar")
    (lib / "libfoo.so").symlink_to("libfoo.so.1")
    app = executable(pkg["bin"] / "bin" / "app0000", APP_C, f"-L{lib}", "-lfoo", f"-Wl,-rpath-link,{dep}")
    for i in range(1, n - n // 2):
        shutil.copy2(foo, lib / f"libfoo{i:04d}.so.1")
    for i in range(1, n // 2):
        shutil.copy2(app, app.with_name(f"app{i:04d}"))
    return pkg, dep


def fresh_copy(template: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(template, dest, symlinks=True)


def outputs_in(pkg: dict[str, Path], template: Path, work: Path) -> dict[str, Path]:
    return {k: work / v.relative_to(template) for k, v in pkg.items()}


def run_patchelf_per_file(outs: dict[str, Path], expected: dict[str, list[str]]) -> None:
    exe = elf_patch.patchelf_binary()
    for root in outs.values():
        for f in elf.iter_elf_files(root):
            subprocess.run([exe, "--set-rpath", ":".join(expected[f.name]), os.fspath(f)], check=True)


def run_fixup(outs: dict[str, Path], dep: Path) -> None:
    hooks.fixup(outs, [dep], driver_dir=DRIVER)


def run_hooks_one_by_one(outs: dict[str, Path], dep: Path) -> None:
    hooks.auto_patchelf(outs, [dep])
    hooks.add_driver_runpath(outs, DRIVER)
    hooks.remove_stubs_from_runpath(outs, DRIVER)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="ELF files in the tree")
    ap.add_argument("-r", "--runs", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="4 files, one run: the CI smoke test of this script")
    args = ap.parse_args(argv)
    if args.tiny:
        args.n, args.runs = 4, 1
    if GCC is None:
        print("gcc is needed to build the ELF files", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        work = Path(tmp) / "work"
        template.mkdir()
        pkg, dep_t = build_template(template, args.n)
        dep = work / dep_t.relative_to(template)
        outs = outputs_in(pkg, template, work)
        n_files = sum(1 for r in pkg.values() for _ in elf.iter_elf_files(r))
        lib_dir = str(outs["lib"] / "lib")
        expected = {"app": [lib_dir, "$ORIGIN", DRIVER], "lib": [str(dep), "$ORIGIN", DRIVER]}

        def expected_for(name: str) -> list[str]:
            return expected["app" if name.startswith("app") else "lib"]

        per_file = {f.name: expected_for(f.name) for r in pkg.values() for f in elf.iter_elf_files(r)}
        cases = [
            ("patchelf per file (answer known)", lambda: run_patchelf_per_file(outs, per_file)),
            ("cudapkgs `fixup` (batched)", lambda: run_fixup(outs, dep)),
            ("cudapkgs hooks one by one", lambda: run_hooks_one_by_one(outs, dep)),
        ]
        results = []
        for label, fn in cases:
            times = []
            for _ in range(args.runs):
                fresh_copy(template, work)
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                # Every case must leave the same RUNPATHs behind.
                for r in outs.values():
                    for f in elf.iter_elf_files(r):
                        got = elf.read_elf(f).runpath
                        assert got == expected_for(f.name), (label, f, got)
            results.append((label, times))
        base = statistics.median(results[0][1])
        print(f"ELF files: {n_files}; runs per row: {args.runs}; patchelf: {elf_patch.patchelf_binary()}\n")
        print("| method | median (ms) | min–max (ms) | per file (ms) | ratio to patchelf per file |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for label, times in results:
            med = statistics.median(times)
            print(
                f"| {label} | {med * 1e3:.1f} | {min(times) * 1e3:.1f}–{max(times) * 1e3:.1f} "
                f"| {med * 1e3 / n_files:.2f} | {med / base:.2f}× |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
