"""`-j 2` against `-j 1` on four independent CPU-bound builds, beside the machine's own scaling.

    python bench/bench_jobs.py                 # 4 builds of --work 10000000 awk iterations, 3 runs
    python bench/bench_jobs.py --tiny          # one run of tiny builds (the CI smoke test)

Four `mkDerivation` packages that depend on nothing; each buildPhase is the same
CPU-bound shell command (an awk loop of --work iterations, one core) and writes
its result to $out. Each run builds all four into a fresh store through the
scheduler (`scheduler.run`, as `cudapkgs build -j N` does), with -j 1 and -j 2.

The peer, measured in the same run: the four bare shell commands, one at a time
and two at a time (two processes kept busy), i.e. what this machine gives two
processes right now. If the peer itself scales less than 1.7×, the machine is
contended and the cudapkgs ratio says more about the load than about cudapkgs:
the script prints the load average before and after to tell.

Prints a Markdown table: median seconds (min–max), and each -j 2 row's speed-up
over its -j 1 row; then the CPU time the cudapkgs process itself spent (not its
builders' processes), the part that could not overlap if it were all serial, and
the speed-up that bound allows on two idle cores (Amdahl).
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
sys.path.insert(0, str(REPO / "src"))

from cudapkgs.config import load_config  # noqa: E402
from cudapkgs.realise.scheduler import plan, run  # noqa: E402
from cudapkgs.stdenv import mk_derivation  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402

BUILDS = 4


def work_command(work: int, salt: int) -> str:
    return f"awk 'BEGIN {{ s = {salt}; for (i = 0; i < {work}; i++) s = (s * 31 + i) % 1000003; print s }}'"


def bare(commands: list[str], parallel: int) -> float:
    """Run the shell commands with `parallel` processes at a time; wall seconds."""
    start = time.perf_counter()
    todo = list(commands)
    running: list[subprocess.Popen] = []
    while todo or running:
        while todo and len(running) < parallel:
            running.append(subprocess.Popen(["bash", "-c", todo.pop(0)], stdout=subprocess.DEVNULL))
        running[0].wait()
        if running[0].returncode != 0:
            raise SystemExit("a bare command failed")
        running.pop(0)
    return time.perf_counter() - start


SELF_CPU: dict[int, list[float]] = {}  # jobs -> CPU seconds of this process (not the builders) per run


def cudapkgs_build(root: Path, work: int, jobs: int, run_id: str) -> float:
    """Build the four packages into a fresh store with `jobs` workers; wall seconds."""
    store_dir = root / f"store-{jobs}-{run_id}"
    config = load_config(overrides={"storeDir": str(store_dir)})
    drvs = [
        mk_derivation(config, {
            "pname": f"cpu-bound-{k}", "version": run_id,
            "stdenvCc": None,  # compiles nothing: only the four builds are timed
            "buildPhase": f"{work_command(work, k)} > result",
            "installPhase": 'cp result "$out/result"',
        }).derivation
        for k in range(BUILDS)
    ]
    with Store.open(store_dir) as store:
        the_plan = plan(store, drvs)
        assert len(the_plan.to_build) == BUILDS
        start = time.perf_counter()
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        run(store, the_plan, jobs=jobs)
        took = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        SELF_CPU.setdefault(jobs, []).append(after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime)
        for d in drvs:
            if not Path(d.outputs["out"], "result").read_text().strip().isdigit():
                raise SystemExit(f"{d.name} built nothing")
    for dirpath, _, _ in os.walk(store_dir):  # store paths are read-only
        os.chmod(dirpath, 0o755)
    shutil.rmtree(store_dir)
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=int, default=10_000_000, help="awk loop iterations per build")
    parser.add_argument("-r", "--runs", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="one run of tiny builds: the CI smoke test of this script")
    args = parser.parse_args(argv)
    if args.tiny:
        args.work, args.runs = 20_000, 1
    if shutil.which("awk", path="/usr/bin:/bin") is None:
        raise SystemExit("awk (in /usr/bin or /bin) is needed for the CPU-bound builds")

    load_before = os.getloadavg()
    commands = [work_command(args.work, k) for k in range(BUILDS)]
    rows: dict[str, list[float]] = {"bare commands, 1 at a time": [], "bare commands, 2 at a time": [],
                                    "cudapkgs build -j 1": [], "cudapkgs build -j 2": []}
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        for i in range(args.runs):  # interleaved, so a change of load hits every row alike
            rows["bare commands, 1 at a time"].append(bare(commands, 1))
            rows["bare commands, 2 at a time"].append(bare(commands, 2))
            rows["cudapkgs build -j 1"].append(cudapkgs_build(Path(tmp), args.work, 1, f"{i}"))
            rows["cudapkgs build -j 2"].append(cudapkgs_build(Path(tmp), args.work, 2, f"{i}"))
    load_after = os.getloadavg()

    print(f"{BUILDS} independent builds of {args.work} awk iterations each; {args.runs} run(s); {os.cpu_count()} CPUs; "
          f"load average (1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n")
    print("| what | median s | min–max s | speed-up of 2 over 1 |\n|---|---:|---:|---:|")
    medians = {k: statistics.median(v) for k, v in rows.items()}
    for name, times in rows.items():
        speedup = ""
        if name.endswith("2 at a time"):
            speedup = f"{medians['bare commands, 1 at a time'] / medians[name]:.2f}"
        elif name.endswith("-j 2"):
            speedup = f"{medians['cudapkgs build -j 1'] / medians[name]:.2f}"
        print(f"| {name} | {medians[name]:.3f} | {min(times):.3f}–{max(times):.3f} | {speedup} |")
    own = statistics.median(SELF_CPU[1])
    bound = medians["bare commands, 1 at a time"] + own
    print(f"\ncudapkgs' own CPU time for the four builds (the scheduler, phases, fix-up, hashing, registration; "
          f"not the builders' processes): {own:.3f} s at -j 1, {statistics.median(SELF_CPU[2]):.3f} s at -j 2. "
          f"If only that part ran serially, -j 2 could reach {bound / (medians['bare commands, 1 at a time'] / 2 + own):.2f}x "
          f"on two idle cores.")


if __name__ == "__main__":
    main()
