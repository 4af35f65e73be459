"""No-op `cudapkgs build -f` of the CMake examples against no-op `cudapkgs build saxpy`, whole process.

Run:  python bench/bench_cmake_noop.py --store /tmp/i9exp/store [--runs 15]
      python bench/bench_cmake_noop.py --tiny      (3 runs, no CUDA row: the CI smoke test)

Setup (not timed): each command runs once first, so every timed run is a no-op build:
evaluate (the user file, the set's nvcc/cudart/cuBLAS, the host tools' versions), one
validity query, re-make the result link.  Rows, median of --runs, spawn to exit: the
interpreter floor, `cudapkgs build saxpy` (the peer: CPU saxpy, the default config),
`build -f examples/cmake_examples.py cmake_hello` (CMake, no CUDA) and, with --store,
`build -f examples/cmake_examples.py cmake_cuda_example` against cudaPackages_13_0
(cudaSupport, capability 9.0, wheels: STORE must hold that set's nvcc, cudart, cuBLAS, or
the setup builds them).  The issue's budget: the CMake example at most 1.5x the peer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scratch import scratch_dir  # bench/scratch.py

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "cmake_examples.py"
CUDA_SETTINGS = ["--set", "cudaSupport=true", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]',
                 "--set", 'cudaCapabilities=["9.0"]', "--arg", "cudaPackages=cudaPackages_13_0"]


def wall(cmd: list[str], runs: int, env: dict[str, str], cwd: str) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--store", help="a store for the CUDA row (with cudaPackages_13_0 realised, or to realise it)")
    parser.add_argument("--tiny", action="store_true", help="3 runs, no CUDA row (the CI smoke test)")
    args = parser.parse_args()
    runs = 3 if args.tiny else args.runs
    cudapkgs = [sys.executable, "-m", "cudapkgs"]
    with scratch_dir("bench-cmake-noop-") as work:
        store = args.store if (args.store and not args.tiny) else os.path.join(work, "store")
        env = {**os.environ, "CUDAPKGS_STORE": store, "XDG_CONFIG_HOME": os.path.join(work, "cfg"),
               "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
        rows = [
            ("`python -c pass`", [sys.executable, "-c", "pass"]),
            ("`cudapkgs build saxpy` (peer)", [*cudapkgs, "build", "saxpy", "-o", "r-saxpy"]),
            ("`cudapkgs build -f examples/cmake_examples.py cmake_hello`",
             [*cudapkgs, "build", "-f", str(EXAMPLES), "cmake_hello", "-o", "r-hello"]),
        ]
        if args.store and not args.tiny:
            rows.append(("`cudapkgs build -f examples/cmake_examples.py cmake_cuda_example` (cudaPackages_13_0)",
                         [*cudapkgs, "build", "-f", str(EXAMPLES), "cmake_cuda_example", *CUDA_SETTINGS, "-o", "r-cuda"]))
        for _, cmd in rows[1:]:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
        # Interleaved rounds, so that load from other work on the machine hits every row alike.
        times: dict[str, list[float]] = {label: [] for label, _ in rows}
        for _ in range(runs):
            for label, cmd in rows:
                times[label] += wall(cmd, 1, env, work)
        peer = statistics.median(times[rows[1][0]])
        print(f"no-op builds, whole process, median of {runs} interleaved runs ({os.cpu_count()} CPUs)\n")
        print("| command | median ms | × peer |")
        print("| --- | ---: | ---: |")
        for label, _ in rows:
            m = statistics.median(times[label])
            print(f"| {label} | {m * 1000:.1f} | {m / peer:.2f}× |")


if __name__ == "__main__":
    main()
