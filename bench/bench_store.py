"""Store commands over a growing synthetic store: `path-info -r -S`, `verify`, `gc --dry-run`.

    python bench/bench_store.py                      # 10, 100, 1000, 5000 paths, 3 runs each
    python bench/bench_store.py --tiny               # 10 and 100 paths, one run (the CI smoke test)

Setup (not timed), per size N: a fresh store whose N paths are registered in the
database with a small file each (a few hundred bytes, so `verify` hashes real
contents). Path i refers to up to three earlier paths chosen at random (seeded),
plus path i-1, so closures are deep and wide: the closure of the last path is the
whole store, the worst case for closure sizes. A `result` link to the last path is
the only GC root, and 10% of the paths (registered after it, referring to nothing
it needs) are garbage.

Rows, each a whole `cudapkgs` process (python -m cudapkgs), median of --runs:

* `path-info -r -S ./result` (every path of the store, each with its closure size);
* `verify` (exists, NAR hash of the contents, references valid, and every valid path
  the contents mention recorded as a reference), with its slope: the seconds each 1,000
  more paths cost from the previous size (flat when it is linear; start-up is in the first row);
* `gc --dry-run`;
* the peer: the same `path-info -r -S` answered the way cudapkgs did before (a
  closure walk per path, two queries per visited node), in-process, for N up to
  --old-max (default 1,000: it is quadratic, 7 s at 1,000 paths here);
* `python -c pass`, the interpreter floor.

Prints a Markdown table: seconds per command and size, and the ratio of the
old per-path walk to the new whole-process `path-info`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.store import nar  # noqa: E402
from cudapkgs.store.paths import make_store_path  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402


def make_store(root: Path, n: int, seed: int = 12) -> tuple[Store, str]:
    """A store of `n` valid paths (see the module docstring); returns it and the root path."""
    rng = random.Random(seed)
    store = Store.open(root / "store")
    live_n = max(1, n - n // 10)
    paths = [make_store_path(store.store_dir, "output:out", f"bench-{i}", f"pkg-{i}") for i in range(n)]
    entries = []
    for i, path in enumerate(paths):
        limit = i if i < live_n else live_n  # garbage refers only to live paths
        refs = {paths[j] for j in rng.sample(range(limit), min(3, limit))} if limit else set()
        if 0 < i < live_n:
            refs.add(paths[i - 1])
        os.mkdir(path)
        body = ("\n".join(sorted(refs)) + "\n").encode() + b"x" * rng.randrange(64, 512)
        with open(os.path.join(path, "data"), "wb") as f:
            f.write(body)
        digest, size = nar.nar_hash(path)
        entries.append((path, nar.format_hash(digest), size, refs, None))
    store.db.register_many(entries)
    store.add_indirect_root(root / "result", paths[live_n - 1])
    return store, paths[live_n - 1]


def old_path_info(store: Store, top: str) -> dict[str, int]:
    """`path-info -r -S` as cudapkgs answered it before: a closure walk per path, two queries per node."""

    def closure(paths):
        todo = deque(store.query(p).path for p in paths)
        seen = set(todo)
        while todo:
            for ref in store.db.references(todo.popleft()):
                if ref not in seen:
                    seen.add(ref)
                    todo.append(ref)
        return seen

    paths = sorted(closure([top]))
    return {p: sum(store.query(q).nar_size for q in closure([p])) for p in paths}


def timed(cmd: list[str], env: dict[str, str], expect: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in expect:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000,5000", help="comma-separated store sizes (paths)")
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--old-max", type=int, default=1000, help="largest size at which to time the old per-path walk")
    parser.add_argument("--tiny", action="store_true", help="10 and 100 paths, one run: the CI smoke test of this script")
    args = parser.parse_args(argv)
    if args.tiny:
        args.sizes, args.runs, args.old_max = "10,100", 1, 100
    sizes = [int(s) for s in args.sizes.split(",")]

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    py = [sys.executable, "-m", "cudapkgs"]
    floor = statistics.median(timed([sys.executable, "-c", "pass"], env) for _ in range(max(3, args.runs)))
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
            root = Path(tmp)
            store, top = make_store(root, n)
            sd = ["--store", store.store_dir]
            cmds = {
                "path-info -r -S": [*py, "path-info", "-r", "-S", str(root / "result"), *sd],
                "verify": [*py, "verify", *sd],
                "gc --dry-run": [*py, "gc", "--dry-run", *sd],
            }
            times = {name: statistics.median(timed(c, env) for _ in range(args.runs)) for name, c in cmds.items()}
            # the new answer equals the old one (checked at every size the old one runs at)
            if n <= args.old_max:
                start = time.perf_counter()
                old = old_path_info(store, top)
                times["old per-path walk (in-process)"] = time.perf_counter() - start
                new = store.graph().closure_sizes(sorted(old))
                if new != old:
                    raise SystemExit(f"closure sizes differ from the old walk at {n} paths")
            live = len(store.graph().closure([top]))
            store.close()
        rows.append((n, live, times))

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"median of {args.runs} whole-process runs; interpreter floor (python -c pass) {floor:.3f} s\n")
    print("| paths | closure of result | path-info -r -S s | verify s | verify s per 1,000 more paths | gc --dry-run s | old per-path walk s | old / new |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    previous: tuple[int, float] | None = None
    for n, live, t in rows:
        old = t.get("old per-path walk (in-process)")
        old_s = f"{old:.3f}" if old is not None else "(not run)"
        ratio = f"{old / t['path-info -r -S']:.1f}" if old is not None else ""
        slope = f"{(t['verify'] - previous[1]) / (n - previous[0]) * 1000:.3f}" if previous else ""
        previous = (n, t["verify"])
        print(f"| {n} | {live} | {t['path-info -r -S']:.3f} | {t['verify']:.3f} | {slope} | {t['gc --dry-run']:.3f} | {old_s} | {ratio} |")


if __name__ == "__main__":
    main()
