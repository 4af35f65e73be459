"""No-op `cudapkgs build -f FILE ATTR` (a user's package file) against no-op `cudapkgs build saxpy`.

Run:  python bench/bench_user_file.py [--runs 21]   (includes the CMake example: NVIDIA's wheels, through pip)
      python bench/bench_user_file.py --tiny        (3 runs, CPU examples only: the CI smoke test)

Setup (not timed): a fresh store in a temporary directory; `saxpy` (the project's own
package, CPU build), `saxpy_example` and (unless --tiny) `cmake_cuda_example` of
`examples/packages.py` (CUDA 13.0 for sm_90 from NVIDIA's wheels, $XDG_CACHE_HOME's wheel
cache reused) are built once, so every later build is a no-op: evaluate, one validity
query, re-make the result link.

Each row is a whole process, spawn to exit, median of --runs: the interpreter floor,
`cudapkgs build saxpy` (the peer), then `cudapkgs build -f examples/packages.py NAME`
for the examples. The issue's budget: the CMake example's no-op -f build at most 1.5x the peer.
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
EXAMPLES = REPO / "examples" / "packages.py"


def wall(cmd: list[str], runs: int, env: dict[str, str], cwd: str) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--tiny", action="store_true", help="3 runs (the CI smoke test)")
    args = parser.parse_args()
    runs = 3 if args.tiny else args.runs
    cudapkgs = [sys.executable, "-m", "cudapkgs"]
    with scratch_dir("bench-user-file-") as work:
        env = {**os.environ, "CUDAPKGS_STORE": os.path.join(work, "store"), "XDG_CONFIG_HOME": os.path.join(work, "cfg"),
               "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
        peer = [*cudapkgs, "build", "saxpy", "-o", "result-saxpy"]
        rows: list[tuple[str, list[str]]] = [("`python -c pass`", [sys.executable, "-c", "pass"]),
                                             ("`cudapkgs build saxpy` (peer)", peer)]
        rows.append(("`cudapkgs build -f examples/packages.py saxpy_example`",
                     [*cudapkgs, "build", "-f", str(EXAMPLES), "saxpy_example", "-o", "result-saxpy-example"]))
        if not args.tiny:
            cuda = ["--set", "cudaSupport=true", "--set", "allowUnfree=true", "--set", 'cudaCapabilities=["9.0"]',
                    "--set", "cudaForwardCompat=false", "--set", 'fetchers=["wheels"]',
                    "--arg", "cudaPackages=cudaPackages_13_0"]
            rows.append(("`cudapkgs build -f examples/packages.py cmake_cuda_example` (CUDA 13.0)",
                         [*cudapkgs, "build", "-f", str(EXAMPLES), "cmake_cuda_example", *cuda, "-o", "result-cmake"]))
        for _, cmd in rows[1:]:  # the first build is the real one: not timed
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
        results = [(label, wall(cmd, runs, env, work)) for label, cmd in rows]
        peer_time = results[1][1]
        print(f"no-op builds, whole process, median of {runs} runs ({os.cpu_count()} CPUs)\n")
        print("| command | median ms | × peer |")
        print("| --- | ---: | ---: |")
        for label, seconds in results:
            print(f"| {label} | {seconds * 1000:.1f} | {seconds / peer_time:.2f}× |")


if __name__ == "__main__":
    main()
