"""A build after gc with the evaluation cache holding its derivations, against the same build evaluating (issue 34, item 4).

Run:  python bench/bench_build_after_gc.py [-n 9]
      python bench/bench_build_after_gc.py --tiny     (2 rounds: the CI smoke test; needs the five wheels once)
      python bench/bench_build_after_gc.py --attr python3Packages.filelock [--set KEY=VALUE ...]
                                                      (other attributes; their sources are fetched in the setup)

The build is bench_wheels.py's: the closure of cudaPackages_13_0.{cuda_cudart, cuda_nvcc,
cuda_cccl} from NVIDIA's wheels (``--set fetchers=["wheels"]``), into a private store, with a
private ``XDG_CACHE_HOME`` whose wheel cache holds hard links to the five wheels of the user's
(filled by one `cudapkgs build` first when missing).  Setup (not timed): the build, then the same
build again (a no-op: its entry holds the derivations).

Each round, in turn (whole processes, ``python -m cudapkgs``; byte code cached as installed):

* ``cudapkgs gc`` (not timed), then the build: the evaluation cache's entry holds the
  derivations, so the build plans, takes the outputs back from the gc'd store's reuse area and
  links, without evaluating (the run is checked to have said ``eval cache: derivations``);
* ``cudapkgs gc`` (not timed), then the build with ``--no-eval-cache``: evaluation, then the same work;
* the no-op build (outputs valid: the fast path answers), for scale.

Prints medians of wall and CPU (user + system of the process and its children), the ratio of
the first row to the second, and the load average (/proc/loadavg) before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ATTRS = ["cudaPackages_13_0.cuda_cudart", "cudaPackages_13_0.cuda_nvcc", "cudaPackages_13_0.cuda_cccl"]
SETS = ["--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]']
WHEELS = ["nvidia_cuda_runtime-13.0.96", "nvidia_cuda_nvcc-13.0.88", "nvidia_cuda_crt-13.0.88",
          "nvidia_nvvm-13.0.88", "nvidia_cuda_cccl-13.0.85"]


def _run(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall ms, CPU ms of the child and its children, stderr); exits with the error when it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:8])} ... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000, done.stderr


def _link_wheels(user_cache: Path, cache: Path) -> bool:
    """Hard links (copies across file systems) of the five wheels and their check files; False when one is missing."""
    source = user_cache / "cudapkgs" / "wheels"
    target = cache / "cudapkgs" / "wheels"
    target.mkdir(parents=True, exist_ok=True)
    for stem in WHEELS:
        found = sorted(source.glob(f"{stem}-*x86_64*.whl*"))
        if not any(p.name.endswith(".whl") for p in found):
            return False
        for path in found:
            try:
                os.link(path, target / path.name)
            except FileExistsError:
                pass
            except OSError:
                shutil.copy2(path, target / path.name)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=9, help="rounds (default: 9)")
    parser.add_argument("--tiny", action="store_true", help="2 rounds: the CI smoke test of this script")
    parser.add_argument("--attr", action="append", default=[], help="attribute to build instead of the five wheels' three")
    parser.add_argument("--set", action="append", default=[], dest="sets", help="KEY=VALUE config for --attr")
    args = parser.parse_args()
    rounds = 2 if args.tiny else args.n
    attrs = args.attr or ATTRS
    sets = [w for s in args.sets for w in ("--set", s)] if args.attr else SETS
    scratch = Path(tempfile.mkdtemp(prefix="bench-build-after-gc-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAPKGS_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO / "src"), PYTHONPYCACHEPREFIX=str(scratch / "pycache"),
               XDG_CACHE_HOME=str(scratch / "cache"), XDG_CONFIG_HOME=str(scratch / "config"),
               XDG_DATA_HOME=str(scratch / "data"), CUDAPKGS_STORE=str(scratch / "store"), CUDAPKGS_EVAL_CACHE_DEBUG="1")
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cudapkgs = [sys.executable, "-m", "cudapkgs"]
    build = [*cudapkgs, "build", "--no-link", *sets, *attrs]
    try:
        if not args.attr and not _link_wheels(user_cache, scratch / "cache"):
            _run([*cudapkgs, "build", "--no-link", "--dry-run", *SETS, *ATTRS], {**env, "XDG_CACHE_HOME": str(user_cache)})
            _run([*build, "--no-eval-cache"], {**env, "XDG_CACHE_HOME": str(user_cache), "CUDAPKGS_STORE": str(scratch / "fill")})
            if not _link_wheels(user_cache, scratch / "cache"):
                raise SystemExit("the five wheels are not in the user's wheel cache")
        for _ in range(3):  # built; then no-op runs until one keeps its entry (inputs written a moment ago are not trusted)
            _run(build, env)
        load_before = open("/proc/loadavg").read().split()[:3]
        rows: dict[str, list[tuple[float, float]]] = {}
        names = ("build after gc, derivations from the entry", "build after gc, evaluating (--no-eval-cache)",
                 "no-op build (the fast path answers)")
        for _ in range(rounds):
            subprocess.run([*cudapkgs, "gc"], env=env, check=True, capture_output=True)
            wall, cpu, err = _run(build, env)
            if "eval cache: derivations\n" not in err:
                raise SystemExit(f"the build after gc did not take its derivations from the entry:\n{err[-3000:]}")
            rows.setdefault(names[0], []).append((wall, cpu))
            subprocess.run([*cudapkgs, "gc"], env=env, check=True, capture_output=True)
            rows.setdefault(names[1], []).append(_run([*build, "--no-eval-cache"], env)[:2])
            wall, cpu, err = _run(build, env)
            rows.setdefault(names[2], []).append((wall, cpu))
        load_after = open("/proc/loadavg").read().split()[:3]
        medians = {name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
                   for name, runs in rows.items()}
        base_wall, base_cpu = medians[names[1]]
        print(f"## Build after gc ({' '.join(attrs)}; median of {rounds} alternating rounds)\n")
        print("| row | wall ms | CPU ms | wall × evaluating | CPU × evaluating |\n|---|---:|---:|---:|---:|")
        for name in names:
            wall, cpu = medians[name]
            print(f"| {name} | {wall:.1f} | {cpu:.1f} | {wall / base_wall:.2f} | {cpu / base_cpu:.2f} |")
        print(f"\nload average before {' '.join(load_before)}, after {' '.join(load_after)}")
    finally:
        for root, dirs, _files in os.walk(scratch):
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o755)
                except OSError:
                    pass
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
