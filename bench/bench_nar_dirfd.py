"""`nar.TreePass` looking entries up in each directory's descriptor (the directory opened O_NOFOLLOW and
fstat-checked, entries lstat'd and opened relative to it) against main's pass, which looked each one
up by its whole path, over a tree of many small files.

    python bench/bench_nar_dirfd.py                   # sympy's sources copied, 7 alternating runs
    python bench/bench_nar_dirfd.py --tree DIR --runs 9 --peer-ref main

The peer is `TreePass` from `git show REF:src/cudapkgs/store/nar.py`, loaded beside this tree's in the
same process; runs alternate, the page cache warm (one untimed round first). Prints the median wall and
CPU seconds of each, their ratios (new / old) and the load average.
"""

from __future__ import annotations

import argparse
import importlib.util
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

from cudapkgs.store import nar  # noqa: E402


def _peer(ref: str):
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:src/cudapkgs/store/nar.py"],
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader("cudapkgs.store._nar_peer", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "cudapkgs.store"
    exec(compile(source, f"{ref}:nar.py", "exec"), module.__dict__)  # noqa: S102 - the repository's own file
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="the tree to hash (default: a copy of sympy's sources)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--peer-ref", default="main", help="the git revision whose TreePass is the peer")
    args = parser.parse_args()
    old = _peer(args.peer_ref)
    with tempfile.TemporaryDirectory(prefix="bench-nar-dirfd-") as scratch:
        tree = args.tree
        if tree is None:
            import sympy  # noqa: PLC0415 - a tree of 1,500 modules that is on this machine

            tree = Path(scratch) / "tree"
            shutil.copytree(os.path.dirname(sympy.__file__), tree, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        root = os.fsencode(tree)
        files = sum(len(f) for _, _, f in os.walk(tree))
        dirs = sum(len(d) for _, d, _ in os.walk(tree)) + 1
        peers = {"new": nar.TreePass, "old": old.TreePass}
        digests = set()
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in peers}
        for run in range(args.runs + 1):
            order = ("new", "old") if run % 2 else ("old", "new")
            for name in order:
                wall, cpu = time.perf_counter(), time.process_time()
                digests.add(peers[name](None).run(root))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if run:  # the first round warms the page cache
                    times[name].append((wall, cpu))
        assert len(digests) == 1, "the two passes hashed differently"
        med = {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for n, t in times.items()}
        print(f"tree: {tree} ({files} files, {dirs} directories), {args.runs} runs each, alternating; "
              f"load {os.getloadavg()[0]:.1f}")
        for name in ("old", "new"):
            print(f"  {name}: median {med[name][0] * 1000:.1f} ms wall, {med[name][1] * 1000:.1f} ms CPU")
        print(f"  new/old: wall {med['new'][0] / med['old'][0]:.3f}, CPU {med['new'][1] / med['old'][1]:.3f}")


if __name__ == "__main__":
    main()
