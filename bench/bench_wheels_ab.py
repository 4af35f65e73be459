"""Two checkouts of cudapkgs, alternating: the five CUDA 13.0 compile wheels into a fresh store each run.

Run:  python bench/bench_wheels_ab.py --base /path/to/other/checkout/src [--runs 8]

This checkout's `src/` against `--base` (another checkout's `src/`, e.g. main's), one
`cudapkgs build --no-link -j auto` each in turn (the order swapped every run), each into a
store of its own that is kept until every run is done (see "Deleting between runs" in
bench_wheels.py). Prints the load average, each side's median wall and CPU seconds (user +
system, the process and its children, from wait4) and the CPU ratio. The wheel cache is the
one the environment names ($XDG_CACHE_HOME/cudapkgs/wheels): run bench_wheels.py once first
so that it holds the five wheels. Output and errors of the builds are discarded; a build
that fails stops the script with its exit status.
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
BUILD = ["build", "--no-link", "-j", "auto", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]',
         "cudaPackages_13_0.cuda_cudart", "cudaPackages_13_0.cuda_nvcc", "cudaPackages_13_0.cuda_cccl"]


def run_once(src: str, store: Path, pycache: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one build with `src` on PYTHONPATH into `store`."""
    command = [sys.executable, "-m", "cudapkgs", *BUILD]
    env = {**os.environ, "PYTHONPATH": src, "CUDAPKGS_STORE": str(store), "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    pid = os.posix_spawn(command[0], command, env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"the build with {src} into {store} failed ({code})")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the other checkout's src/ directory")
    parser.add_argument("-r", "--runs", type=int, default=8)
    args = parser.parse_args(argv)
    sides = {"this": str(REPO / "src"), "base": os.path.abspath(args.base)}
    scratch = Path(tempfile.mkdtemp(prefix="bench-wheels-ab-"))
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    try:
        for name, src in sides.items():  # not timed: byte code compiled, caches warm
            run_once(src, scratch / f"warm-{name}", scratch / f"pycache-{name}")
        before = os.getloadavg()
        for i in range(args.runs):
            order = list(sides.items()) if i % 2 == 0 else list(reversed(sides.items()))
            for name, src in order:
                results[name].append(run_once(src, scratch / f"store-{name}-{i}", scratch / f"pycache-{name}"))
        after = os.getloadavg()
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(scratch)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"runs: {args.runs}; load average before {' '.join(f'{x:.2f}' for x in before)}, "
          f"after {' '.join(f'{x:.2f}' for x in after)}")
    cpu = {}
    for name, rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        cpu[name] = statistics.median(r[1] for r in rows)
        print(f"{name} ({sides[name]}): wall median {wall:.2f} s, CPU median {cpu[name]:.2f} s; "
              f"CPU each run {' '.join(f'{r[1]:.2f}' for r in rows)}")
    print(f"this / base, CPU medians: {cpu['this'] / cpu['base']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
