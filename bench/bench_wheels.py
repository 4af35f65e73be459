"""Realising cuda_cudart + cuda_nvcc + cuda_cccl from cached wheels, against `pip install` of the same wheels.

Run:  python bench/bench_wheels.py [--runs 5]   (CUDAPKGS_MANIFESTS defaults to ../shared/manifests)

Setup (not timed): one `cudapkgs build` into a scratch store fills cudapkgs'
wheel cache ($XDG_CACHE_HOME/cudapkgs/wheels, pip's download dir). The closure
is five wheels: cuda_nvcc needs cuda_crt and libnvvm.

Each row is whole processes, timed from spawn to exit, the median of --runs,
each run in a fresh temporary directory:
- `cudapkgs build --no-link` of the three attributes of cudaPackages_13_0 into a
  fresh store, fetchers=["wheels"], with -j auto and -j 1. It evaluates, runs
  `pip download` once per wheel (pip re-checks the cached file against the
  index's sha256), unpacks each wheel (checking every file against RECORD),
  splits outputs, patches ELF run paths, arranges nvcc and registers the paths.
- `python -m venv` (with pip, as users make one), then the venv's
  `pip install --no-deps --no-index` of the same five wheel files, and the sum.
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

ATTRS = ["cudaPackages_13_0.cuda_cudart", "cudaPackages_13_0.cuda_nvcc", "cudaPackages_13_0.cuda_cccl"]
SETS = ["allowUnfree=true", 'fetchers=["wheels"]']
WHEELS = ["nvidia_cuda_runtime-13.0.96", "nvidia_cuda_nvcc-13.0.88", "nvidia_cuda_crt-13.0.88",
          "nvidia_nvvm-13.0.88", "nvidia_cuda_cccl-13.0.85"]


def cudapkgs_build(jobs: str) -> list[str]:
    """The build command; the store comes from $CUDAPKGS_STORE."""
    command = [sys.executable, "-m", "cudapkgs", "build", "--no-link", "-j", jobs]
    for s in SETS:
        command += ["--set", s]
    return command + ATTRS


def timed(command: list[str], env: dict[str, str], *, check: bool = True) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        if not check:
            raise RuntimeError(done.stderr)
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return elapsed


def tree_size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("CUDAPKGS_MANIFESTS", str(Path(__file__).resolve().parents[2] / "shared" / "manifests"))
    scratch = Path(tempfile.mkdtemp(prefix="bench-wheels-"))
    try:
        env["CUDAPKGS_STORE"] = str(scratch / "warm-store")
        timed(cudapkgs_build("auto"), env)  # fills the wheel cache
        cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cudapkgs" / "wheels"
        wheels = [next(iter(sorted(cache.glob(f"{stem}-*x86_64*.whl")))) for stem in WHEELS]
        rows: dict[str, list[float]] = {k: [] for k in
                                        ("build -j auto", "build -j 1", "venv", "pip install", "venv + pip install")}
        sizes: dict[str, int] = {}
        for i in range(args.runs):
            for jobs in ("auto", "1"):
                store = scratch / f"store-{jobs}-{i}"
                env["CUDAPKGS_STORE"] = str(store)
                rows[f"build -j {jobs}"].append(timed(cudapkgs_build(jobs), env))
                sizes["store paths"] = sum(tree_size(p) for p in store.iterdir() if not p.name.startswith("."))
                sizes["store .cache"] = tree_size(store / ".cache")
                shutil.rmtree(store, ignore_errors=True)
            venv = scratch / f"venv-{i}"
            t_venv = timed([sys.executable, "-m", "venv", str(venv)], env)
            t_pip = timed([str(venv / "bin" / "pip"), "install", "--no-deps", "--no-index",
                           "--disable-pip-version-check", *map(str, wheels)], env)
            rows["venv"].append(t_venv)
            rows["pip install"].append(t_pip)
            rows["venv + pip install"].append(t_venv + t_pip)
            sizes["venv nvidia/"] = sum(tree_size(p / "nvidia") for p in venv.glob("lib/python*/site-packages"))
            shutil.rmtree(venv, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in rows.items()}
    if args.json:
        print(json.dumps({"runs": args.runs, "median_s": medians, "all_s": rows,
                          "bytes": sizes}, indent=2))
        return 0
    print(f"wheels: {sum(w.stat().st_size for w in wheels) / 2**20:.1f} MiB in {len(wheels)} files; "
          f"runs: {args.runs}; cpus: {os.cpu_count()}")
    for key, value in medians.items():
        spread = f"{min(rows[key]):.2f}-{max(rows[key]):.2f}"
        print(f"{key:<20} {value:7.2f} s   (min-max {spread})")
    for key, value in sizes.items():
        print(f"{key:<20} {value / 2**20:7.1f} MiB on disk")
    return 0


if __name__ == "__main__":
    sys.exit(main())
