"""Builds on Dask: scheduling overhead per derivation, and throughput from 1 to 4 workers.

Run:  python bench/bench_dask.py            # the full measurement (docs/distributed.md)
      python bench/bench_dask.py --tiny     # seconds; CI runs this so the bench cannot rot

Two tables:

1. **Scheduling overhead.** A DAG of N no-op derivations (N=1,000; each depends
   on up to two earlier ones) handed to `run_on_dask` with a no-op task in
   place of the worker's build, on 4 local worker processes: the time per
   derivation is everything cudapkgs and Dask add around a build (payloads,
   task graph, dependency edges, completion handling). The peer is the same
   graph submitted straight to Dask with `Client.submit` (the engine's floor).
2. **Throughput.** M real derivations whose build is `sleep S` (mkDerivation,
   shell phases), built remotely end to end (each in a child process of its
   worker in a private mount namespace, outputs pushed to a file:// cache and
   substituted by the client) on 1 worker and on 4: the speed-up.

Needs `distributed` and, for table 2, `unshare --mount` (root or user namespaces).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cudapkgs.config import load_config  # noqa: E402
from cudapkgs.derivation import Derivation  # noqa: E402
from cudapkgs.realise.dask_executor import DaskBuilders, run_on_dask  # noqa: E402
from cudapkgs.realise.dask_local import LocalBuildCluster  # noqa: E402
from cudapkgs.stdenv import mk_derivation  # noqa: E402
from cudapkgs.store.caches.signing import generate  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402


def noop(*_args):
    return {"worker": "noop"}


def dag(store_dir: str, n: int, seed: int = 1) -> list[Derivation]:
    rng = random.Random(seed)
    drvs: list[Derivation] = []
    for i in range(n):
        deps = rng.sample(drvs, k=min(len(drvs), rng.choice((0, 1, 2)))) if drvs else []
        drvs.append(Derivation(
            store_dir=store_dir, name=f"noop-{i}", system="x86_64-linux", outputs=["out"], builder="mkDerivation",
            src=None, input_paths={f"dep{j}": d.outputs["out"] for j, d in enumerate(deps)}, attrs={"i": i}, deps=deps,
        ))
    return drvs


def overhead(n: int, workers: int, tmp: Path) -> tuple[float, float]:
    """(seconds per derivation through run_on_dask, seconds per task with plain Client.submit)."""
    from distributed import Client, LocalCluster, wait

    store_dir = str(tmp / "store-overhead")
    drvs = dag(store_dir, n)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Store.open(store_dir) as store:
        builders = DaskBuilders(address=cluster.scheduler_address, cache=f"file://{tmp}/cache-overhead")
        run_on_dask(store, drvs[: min(n, 20)], builders, stream=io.StringIO(), task=noop)  # warm-up
        start = time.perf_counter()
        run_on_dask(store, drvs, builders, stream=io.StringIO(), task=noop)
        ours = (time.perf_counter() - start) / n
        with Client(cluster.scheduler_address) as client:
            start = time.perf_counter()
            futures: dict[str, object] = {}
            for drv in drvs:
                deps = [futures[d.drv_path] for d in drv.deps]
                futures[drv.drv_path] = client.submit(noop, drv.drv_path, *deps, pure=False)
            wait(list(futures.values()))
            peer = (time.perf_counter() - start) / n
    return ours, peer


def throughput(m: int, sleep: float, workers: int, tmp: Path, tag: str) -> float:
    """Seconds to build `m` independent `sleep` derivations remotely on `workers` workers."""
    store_dir = tmp / f"client-{tag}"
    key = generate("bench-1")
    key_file = tmp / f"key-{tag}"
    key_file.write_text(str(key))
    config = load_config(overrides={"storeDir": str(store_dir)})
    pkgs = [mk_derivation(config, {"pname": f"sleep-{tag}-{i}", "version": "1", "buildPhase": f"sleep {sleep}", "stdenvCc": None,
                                   "installPhase": 'mkdir -p "$out"; echo done > "$out/done"'}) for i in range(m)]
    with LocalBuildCluster(tmp / f"workers-{tag}") as cluster:
        for w in range(workers):
            cluster.start_worker(f"w{w}")
        cluster.wait_for(workers)
        builders = DaskBuilders(address=cluster.address, cache=f"file://{tmp}/cache-{tag}", sign_key_file=str(key_file),
                                trusted_keys=[str(key.public)])
        with Store.open(store_dir) as store:
            start = time.perf_counter()
            run_on_dask(store, [p.derivation for p in pkgs], builders, stream=io.StringIO())
            return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a few seconds: small DAG, 2 workers (CI)")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of table 1 (median)")
    args = parser.parse_args()
    logging.getLogger("distributed").setLevel(logging.CRITICAL)  # teardown chatter, not results
    n, workers, m, sleep, wide = (60, 2, 4, 0.5, 2) if args.tiny else (1000, 4, 16, 2.0, 4)
    runs = 1 if args.tiny else args.runs
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-dask-") as tmp_name:
        tmp = Path(tmp_name)
        samples = [overhead(n, workers, tmp / f"o{r}") for r in range(runs)]
        ours = statistics.median(s[0] for s in samples)
        peer = statistics.median(s[1] for s in samples)
        print(f"Scheduling overhead: {n} no-op derivations (DAG), {workers} local workers, median of {runs}")
        print(f"| {'what':<42} | {'per derivation':>15} |")
        print(f"|{'-' * 44}|{'-' * 17}|")
        print(f"| {'cudapkgs run_on_dask (no-op task)':<42} | {ours * 1000:>12.2f} ms |")
        print(f"| {'peer: the same graph with Client.submit':<42} | {peer * 1000:>12.2f} ms |")
        print(f"| {'ratio (cudapkgs / peer)':<42} | {ours / peer:>14.2f}x |")
        print()
        one = throughput(m, sleep, 1, tmp, "one")
        many = throughput(m, sleep, wide, tmp, "many")
        print(f"Throughput: {m} remote builds of `sleep {sleep:g}`, end to end (push + substitute)")
        print(f"| {'workers':<42} | {'seconds':>15} |")
        print(f"|{'-' * 44}|{'-' * 17}|")
        print(f"| {'1':<42} | {one:>15.2f} |")
        print(f"| {wide!s:<42} | {many:>15.2f} |")
        print(f"| {f'speed-up ({wide} vs 1)':<42} | {one / many:>14.2f}x |")
        print(f"\nload average at start: {load:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
