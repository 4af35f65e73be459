"""The cost of opening each listed file with `nar.open_listed` (O_NONBLOCK, one fstat, the inode checked)
against the plain open it replaced, in one `TreePass` over a tree of many small files.

    python bench/bench_nar_open.py                   # sympy's sources copied, 7 alternating runs
    python bench/bench_nar_open.py --tree DIR --runs 9

The peer is the old open (`os.open(path, O_RDONLY|O_NOFOLLOW|O_CLOEXEC|O_NOCTTY)`, no fstat), put in
place of `nar.open_listed` in the same process; runs alternate, the page cache warm (one untimed pass
first). Prints the median wall and CPU seconds of each, their ratios (new / old) and the load average.
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


def _default_tree(scratch: Path) -> Path:
    import sympy  # noqa: PLC0415 - a tree of 1,500 modules that is on this machine

    tree = scratch / "tree"
    shutil.copytree(os.path.dirname(sympy.__file__), tree, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="the tree to hash (default: a copy of sympy's sources)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    new_open = nar.open_listed

    def old_open(path: bytes | str, st: os.stat_result) -> int:
        return os.open(path, nar._READ)

    with tempfile.TemporaryDirectory(prefix="bench-nar-open-") as scratch:
        tree = args.tree or _default_tree(Path(scratch))
        root = os.fsencode(tree)
        files = sum(len(f) for _, _, f in os.walk(tree))
        digests = set()
        times: dict[str, list[tuple[float, float]]] = {"new": [], "old": []}
        for run in range(args.runs + 1):
            for name, opener in (("new", new_open), ("old", old_open)) if run % 2 else (("old", old_open), ("new", new_open)):
                nar.open_listed = opener
                wall, cpu = time.perf_counter(), time.process_time()
                digests.add(nar.TreePass(None).run(root))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if run:  # the first round warms the page cache
                    times[name].append((wall, cpu))
        nar.open_listed = new_open
        assert len(digests) == 1, "the two openers hashed differently"
        med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}
        print(f"tree: {tree} ({files} files), {args.runs} runs each, alternating; load {os.getloadavg()}")
        for name in ("old", "new"):
            print(f"  {name}: median {med[name][0] * 1000:.1f} ms wall, {med[name][1] * 1000:.1f} ms CPU")
        print(f"  new/old: wall {med['new'][0] / med['old'][0]:.3f}, CPU {med['new'][1] / med['old'][1]:.3f}")


if __name__ == "__main__":
    main()
