"""`nar.scan_for_hashes` reading at most each file's listed size (unbuffered, size + 1 at most) against
the read to the end it replaced, over a tree of many small files.

    python bench/bench_scan_bound.py                   # sympy's sources copied, 7 alternating runs
    python bench/bench_scan_bound.py --tree DIR --runs 9

The peer is the old loop (a buffered ``f.read(CHUNK)`` until the end), put in place in the same
process; runs alternate, the page cache warm (one untimed pass of each first). Prints the median wall
and CPU seconds of each, their ratios (new / old) and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.store import nar  # noqa: E402
from cudapkgs.store.paths import HASH_LEN  # noqa: E402

WANTED = ["0" * 32, "1" * 32, "a" * 32]  # never found: every byte is read and searched


def old_scan(path: Path, hashes: list[str]) -> set[str]:
    """The loop before the bound (files read to their end), with the same open."""
    wanted = {h.encode() for h in hashes}
    found: set[str] = set()
    root = os.fspath(path)
    for rel, st in nar.walk(root):
        full = os.path.join(root, rel) if rel else root
        if nar.stat.S_ISREG(st.st_mode):
            tail = b""
            with open(nar.open_listed(full, st), "rb") as f:
                while chunk := f.read(nar.CHUNK):
                    data = tail + chunk
                    found |= {h.decode() for h in wanted if data.find(h) != -1}
                    tail = data[-(HASH_LEN - 1):]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="the tree to scan (default: a copy of sympy's sources)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scan-") as scratch:
        tree = args.tree
        if tree is None:
            import sympy  # noqa: PLC0415 - a tree of 1,500 modules that is on this machine

            tree = Path(scratch) / "tree"
            shutil.copytree(os.path.dirname(sympy.__file__), tree, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        peers = {"new": lambda: nar.scan_for_hashes(tree, WANTED), "old": lambda: old_scan(tree, WANTED)}
        for run in peers.values():
            run()  # warm
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in peers}
        for _ in range(args.runs):
            for name, run in peers.items():
                wall, cpu = time.perf_counter(), time.process_time()
                run()
                times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
        files = sum(1 for _, st in nar.walk(tree) if nar.stat.S_ISREG(st.st_mode))
        med = {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for n, t in times.items()}
        for name, (wall, cpu) in med.items():
            print(f"{name}: wall {wall * 1000:.1f} ms, CPU {cpu * 1000:.1f} ms (median of {args.runs}, {files} files)")
        print(f"new / old: wall {med['new'][0] / med['old'][0]:.3f}, CPU {med['new'][1] / med['old'][1]:.3f}; "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
