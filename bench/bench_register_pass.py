"""What the registration does per entry of an output: hash + scan, then a walk making it read-only (before),
against one pass doing both (`nar.Freeze`, now), on a copy of a real tree, alternating in one process.

Run:  python bench/bench_register_pass.py TREE [--runs 5]     (TREE: a store path, e.g. torch's output)
      python bench/bench_register_pass.py --tiny               (a synthetic tree of 3,000 files; CI)

TREE is copied once into a scratch directory (not timed); before each timed pass its modes and mtimes
are put back as a build leaves them (0644/0755, now; not timed). Timed: ``nar.hash_and_scan_named``
with the store's scan, then ``files._make_read_only`` (the old registration), or
``nar.hash_and_scan_named(..., freeze=nar.Freeze(root_writable=True))`` (the new one). Printed: medians
of wall and CPU (process time: every thread), the ratios new/old, the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import stat
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.store import files, nar  # noqa: E402


def reset(root: Path) -> int:
    """Modes and mtimes as a build leaves them; the number of entries."""
    count = 0
    for directory, dirs, names in os.walk(root):
        os.chmod(directory, 0o755)
        count += 1
        for name in names:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(path, 0o755 if st.st_mode & stat.S_IXUSR else 0o644)
                os.utime(path)
            count += 1
    return count


def synthetic(root: Path) -> None:
    for d in range(30):
        sub = root / f"pkg{d:02}" / "sub"
        sub.mkdir(parents=True)
        for f in range(100):
            (sub / f"m{f:03}.py").write_bytes(b"x = %d\n" % f * 20)
    (root / "lib.so").write_bytes(os.urandom(4 << 20))


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", nargs="?")
    parser.add_argument("-r", "--runs", type=int, default=5)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    if not args.tiny and not args.tree:
        parser.error("TREE or --tiny")
    scratch = Path(tempfile.mkdtemp(prefix="bench-register-pass-"))
    try:
        tree = scratch / "out"
        if args.tiny:
            synthetic(tree)
            args.runs = 1
        else:
            shutil.copytree(args.tree, tree, symlinks=True)
        entries = reset(tree)
        store_dir = str(Path(args.tree).parent) if args.tree else str(scratch)
        candidates = nar.Candidates(["0" * 32])

        def old() -> None:
            nar.hash_and_scan_named(tree, candidates, store_dir)
            files._make_read_only(tree, keep_root_writable=True)

        def new() -> None:
            nar.hash_and_scan_named(tree, candidates, store_dir, nar.Freeze(root_writable=True))

        rows: dict[str, list[tuple[float, float]]] = {"hash, then the read-only walk (before)": [],
                                                      "one pass with nar.Freeze (now)": []}
        load_before = os.getloadavg()
        for _ in range(args.runs):
            for name, fn in zip(rows, (old, new)):
                reset(tree)
                rows[name].append(timed(fn))
        load_after = os.getloadavg()
        print(f"{entries} entries; runs: {args.runs}; load average before {' '.join(f'{x:.2f}' for x in load_before)}, "
              f"after {' '.join(f'{x:.2f}' for x in load_after)}\n")
        print("| what | median wall s | median CPU s |\n|---|---:|---:|")
        med = {}
        for name, values in rows.items():
            med[name] = (statistics.median(w for w, _ in values), statistics.median(c for _, c in values))
            print(f"| {name} | {med[name][0]:.3f} | {med[name][1]:.3f} |")
        (ow, oc), (nw, nc) = med.values()
        print(f"\nnow / before: wall {nw / ow:.2f}x, CPU {nc / oc:.2f}x")
    finally:
        files._remove_tree(scratch)


if __name__ == "__main__":
    main()
