"""Benchmark a file:// zstd binary cache against tar + zstd on the same store paths.

    python bench/bench_cache.py --store /tmp/cudapkgs-store --paths-from build/compile-closure.txt -r 3
    python bench/bench_cache.py --tiny          # a synthetic ~8 MiB closure (what CI runs)

Rows, each operation in its own child process (so its peak RSS is its own; Python's
start-up, ~50 ms, is inside the cudapkgs rows), medians of -r runs, warm page cache:

* upload: `Cache.upload_closure` (NAR, sha256, zstd level 3, rename; no signing) into an
  empty cache directory vs `tar -I zstd -cf` of the same paths (zstd's default level 3);
* substitute: `Substituters.fetch` of the whole closure (signature checked, -j 4) into an
  empty store at the same directory vs `tar -I zstd -xf` of the tar into an empty directory.

The store is moved aside for the substitute rows (store paths embed the store directory)
and moved back afterwards, whatever happens. Budgets (issue 11): each cudapkgs row at most
1.5 x its tar row; peak RSS under 100 MiB.
"""

from __future__ import annotations

import argparse
import json
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

CHILD = r"""
import os, sys
sys.path.insert(0, {src!r})
from cudapkgs.store.store import Store
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import SecretKey
op, store_dir, cache_url, key_text, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
key = SecretKey.parse(key_text)
cache = open_cache(cache_url)
with Store.open(store_dir) as store:
    if op == "upload":
        cache.upload_closure(store, paths, secret_key=key)
    else:
        from cudapkgs.store.caches.substitution import Substituters
        subs = Substituters([cache], [key.public])
        found = subs.query(store, paths)
        todo = [found[p] for p in subs.closure_of(found, paths)]
        assert len(todo) == len(paths), (len(todo), len(paths))
        subs.fetch(store, todo, jobs=4)
"""


def timed(cmd: list[str]) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) and CPU seconds (user + system) of one child process (its own rusage, via wait4)."""
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({process.returncode}): {process.stderr.read().decode()[-500:]}")
    return wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def run_child(op: str, store_dir: str, cache_url: str, key: str, paths: list[str]) -> tuple[float, int, float]:
    return timed([sys.executable, "-c", CHILD.format(src=str(REPO / "src")), op, store_dir, cache_url, key, *paths])


def tiny_store(root: Path) -> tuple[str, list[str]]:
    """A store with a 3-path closure of ~8 MiB (text-like and random data)."""
    from cudapkgs.store.store import Store

    store_dir = root / "store"
    with Store.open(store_dir) as store:
        def lib(out: Path) -> None:
            out.mkdir()
            (out / "lib").mkdir()
            (out / "lib" / "libx.so").write_bytes(os.urandom(3 << 20))
            (out / "include").mkdir()
            for i in range(200):
                (out / "include" / f"h{i}.h").write_text(f"#define X{i} {i}\n" * 200)
        a = store.add_path("tiny-lib", lib)

        def tool(out: Path) -> None:
            out.mkdir()
            (out / "bin").mkdir()
            (out / "bin" / "tool").write_bytes(a.encode() + os.urandom(2 << 20))
            os.chmod(out / "bin" / "tool", 0o755)
        b = store.add_path("tiny-tool", tool, references_candidates=[a])
        paths = sorted(store.closure([b]))
    return str(store_dir), paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store holding the paths")
    parser.add_argument("--paths-from", help="file listing store paths (one per line); their closure is used")
    parser.add_argument("paths", nargs="*", help="store paths (their closure is used)")
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a synthetic ~8 MiB closure in a temporary store")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from cudapkgs.store.caches.signing import generate
    from cudapkgs.store.store import Store

    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    aside = None
    store_dir = None
    try:
        if args.tiny:
            store_dir, wanted = tiny_store(work)
        else:
            if not args.store:
                parser.error("--store is needed (or --tiny)")
            store_dir = os.path.abspath(args.store)
            wanted = list(args.paths)
            if args.paths_from:
                wanted += [l.strip() for l in open(args.paths_from) if l.strip()]
        with Store.open(store_dir) as store:
            paths = sorted(store.closure(wanted))
            nar_bytes = sum(store.query(p).nar_size for p in paths)
        key = str(generate("bench-1"))
        names = [os.path.basename(p) for p in paths]
        rows: dict[str, list[tuple[float, int, float]]] = {k: [] for k in ("tar -I zstd -cf", "cudapkgs upload",
                                                                   "tar -I zstd -xf", "cudapkgs substitute")}
        sizes = {}
        for run in range(args.runs):
            tar = work / f"closure-{run}.tar.zst"
            rows["tar -I zstd -cf"].append(timed(["tar", "-I", "zstd", "-cf", str(tar), "-C", store_dir, *names]))
            cache_dir = work / f"cache-{run}"
            rows["cudapkgs upload"].append(run_child("upload", store_dir, f"file://{cache_dir}", key, paths))
            sizes["tar"] = tar.stat().st_size
            sizes["cache"] = sum(f.stat().st_size for f in (cache_dir / "nar").iterdir())
        # substitute: the store moves aside; an empty store takes its directory
        aside = Path(store_dir + ".bench-aside")
        os.rename(store_dir, aside)
        for run in range(args.runs):
            out = work / f"untar-{run}"
            out.mkdir()
            rows["tar -I zstd -xf"].append(timed(["tar", "-I", "zstd", "-xf", str(work / f"closure-{run}.tar.zst"), "-C", str(out)]))
            _rmtree(out)
            Store.open(store_dir).close()
            rows["cudapkgs substitute"].append(run_child("substitute", store_dir, f"file://{work}/cache-{run}", key, paths))
            _rmtree(Path(store_dir))
    finally:
        if aside is not None and aside.exists():
            if os.path.exists(store_dir):
                _rmtree(Path(store_dir))
            os.rename(aside, store_dir)
        _rmtree(work)

    med = {k: statistics.median(t for t, _, _ in v) for k, v in rows.items()}
    best = {k: min(t for t, _, _ in v) for k, v in rows.items()}
    cpu = {k: statistics.median(c for _, _, c in v) for k, v in rows.items()}
    rss = {k: max(r for _, r, _ in v) for k, v in rows.items()}
    ratios = {"upload": med["cudapkgs upload"] / med["tar -I zstd -cf"],
              "substitute": med["cudapkgs substitute"] / med["tar -I zstd -xf"]}
    cpu_ratios = {"upload": cpu["cudapkgs upload"] / cpu["tar -I zstd -cf"],
                  "substitute": cpu["cudapkgs substitute"] / cpu["tar -I zstd -xf"]}
    result = {"paths": len(paths), "narBytes": nar_bytes, "runs": args.runs, "median_s": med, "min_s": best, "median_cpu_s": cpu,
              "maxrss_kib": rss, "ratios": ratios, "cpu_ratios": cpu_ratios, "compressed": sizes,
              "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{len(paths)} paths, {nar_bytes / 2**20:.1f} MiB of NAR; tar.zst {sizes['tar'] / 2**20:.1f} MiB, "
          f"cache NARs {sizes['cache'] / 2**20:.1f} MiB; median of {args.runs} runs, warm page cache\n")
    print("| operation | tool | median wall s | ratio to tar | min wall s | min ratio | median CPU s | CPU ratio | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for op, peer, ours in (("upload", "tar -I zstd -cf", "cudapkgs upload"), ("substitute", "tar -I zstd -xf", "cudapkgs substitute")):
        print(f"| {op} | {peer} | {med[peer]:.3f} | 1.00 | {best[peer]:.3f} | 1.00 | {cpu[peer]:.3f} | 1.00 | {rss[peer] / 1024:.1f} |")
        print(f"| {op} | {ours} | {med[ours]:.3f} | {ratios[op]:.2f} | {best[ours]:.3f} | {best[ours] / best[peer]:.2f} | "
              f"{cpu[ours]:.3f} | {cpu_ratios[op]:.2f} | {rss[ours] / 1024:.1f} |")
    print(f"\nload average during the run: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    return 0


def _rmtree(path: Path) -> None:
    if not path.exists():
        return
    for dirpath, dirnames, _ in os.walk(path):
        os.chmod(dirpath, 0o755)
    shutil.rmtree(path)


if __name__ == "__main__":
    sys.exit(main())
