"""The cost of the NAR passes' file checks (each listed file opened non-blocking and fstat-checked,
directories opened O_NOFOLLOW and looked up through their descriptor, reads bounded by the listed size)
against the passes of an earlier revision, over a tree of many small files.

    python bench/bench_nar_checks.py                        # sympy's sources copied, 7 alternating rounds
    python bench/bench_nar_checks.py --tree DIR --runs 9 --peer-ref 3fbe356
    python bench/bench_nar_checks.py --tiny                 # a small synthetic tree, one round (CI)

The peer is ``src/cudapkgs/store/nar.py`` of ``--peer-ref`` (default 3fbe356, the revision before the
checks; ``git show``), loaded beside this tree's module in the same process.  Two passes are timed:
``TreePass`` (the NAR hash of registration and verify) and ``scan_for_hashes`` (the reference scan
alone).  Rounds alternate the order; one untimed round first warms the page cache.  The two must give
the same hash and the same references, else the script fails.  Prints a Markdown table of median wall
and CPU milliseconds, the ratios (this tree / peer) and the load average.  Without git history (a
shallow or archived checkout) the peer is this tree itself, and the table says so.
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

WANTED = ["0" * 32, "1" * 32, "a" * 32]  # never found: every byte is read and searched


def _peer(ref: str):
    """The nar module of `ref`, or None when git cannot show it."""
    try:
        source = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:src/cudapkgs/store/nar.py"],
                                check=True, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    spec = importlib.util.spec_from_loader("cudapkgs.store._nar_peer", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "cudapkgs.store"
    exec(compile(source, f"{ref}:nar.py", "exec"), module.__dict__)  # noqa: S102 - the repository's own file
    return module


def _tiny_tree(root: Path) -> Path:
    for d in range(8):
        sub = root / f"d{d}" / "inner"
        sub.mkdir(parents=True)
        for f in range(25):
            (sub / f"m{f}.py").write_bytes(os.urandom(64).hex().encode() * (f + 1))
        (root / f"d{d}" / "link").symlink_to("inner/m0.py")
    return root


def _sympy_tree(root: Path) -> Path:
    import sympy  # noqa: PLC0415 - a tree of 1,500 modules that is on this machine

    shutil.copytree(os.path.dirname(sympy.__file__), root, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="the tree to read (default: a copy of sympy's sources)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--peer-ref", default="3fbe356", help="the git revision whose nar.py is the peer")
    parser.add_argument("--tiny", action="store_true", help="a small synthetic tree, one round: the CI smoke test")
    args = parser.parse_args()
    runs = 1 if args.tiny else args.runs
    old = _peer(args.peer_ref)
    peer_name = args.peer_ref if old is not None else "this tree (no git history)"
    old = old or nar
    with tempfile.TemporaryDirectory(prefix="bench-nar-checks-") as scratch:
        tree = args.tree or (_tiny_tree if args.tiny else _sympy_tree)(Path(scratch) / "tree")
        root = os.fsencode(tree)
        files = sum(len(f) for _, _, f in os.walk(tree))
        passes = {
            "TreePass (NAR hash)": {"new": lambda: nar.TreePass(None).run(root), "old": lambda: old.TreePass(None).run(root)},
            "scan_for_hashes": {"new": lambda: frozenset(nar.scan_for_hashes(tree, WANTED)),
                                "old": lambda: frozenset(old.scan_for_hashes(tree, WANTED))},
        }
        rows = []
        for label, peers in passes.items():
            results = {peers["new"](), peers["old"]()}  # the untimed warm-up round
            if len(results) != 1:
                raise SystemExit(f"{label}: this tree and {peer_name} disagree: {results}")
            times: dict[str, list[tuple[float, float]]] = {"new": [], "old": []}
            for run in range(runs):
                for name in ("new", "old") if run % 2 else ("old", "new"):
                    wall, cpu = time.perf_counter(), time.process_time()
                    peers[name]()
                    times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            med = {n: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for n, t in times.items()}
            rows.append((label, med))
        print(f"tree: {tree} ({files} files), {runs} rounds, alternating; peer {peer_name}; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
        print("| pass | this tree wall ms | CPU ms | peer wall ms | CPU ms | wall ratio | CPU ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, med in rows:
            (nw, nc), (ow, oc) = med["new"], med["old"]
            print(f"| {label} | {nw * 1000:.1f} | {nc * 1000:.1f} | {ow * 1000:.1f} | {oc * 1000:.1f} | "
                  f"{nw / ow:.3f} | {nc / max(oc, 1e-9):.3f} |")


if __name__ == "__main__":
    main()
