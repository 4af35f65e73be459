"""Start-up: whole `cudapkgs` processes against the interpreter floor, measured side by side.

    python bench/bench_startup.py            # 21 rounds
    python bench/bench_startup.py -n 41 --json
    python bench/bench_startup.py --tiny     # 2 rounds: the CI smoke test of this script

Run it with the interpreter cudapkgs is installed in (the project's venv): the peer and the
commands use this interpreter too, so a site-packages `.pth` that imports modules at every
start (this machine's base interpreter has one) would inflate the floor and every row alike.

Each round runs, in turn: the peer ``python -I -c pass`` (the interpreter floor), then
``cudapkgs eval cudaPackages.cudaMajorMinorVersion``, ``cudapkgs cdi generate`` on a fake
one-GPU machine (proc/sysfs discovery, the machine of tests/containers/cdi_fakes.py),
and ``cudapkgs doctor`` (on this machine).  Interleaving keeps a busy machine's noise in
every row alike.  Bytecode is written and used (a user's install has it; this bench
unsets PYTHONDONTWRITEBYTECODE and warms up once).  The table gives medians, min and max
in ms, and each median's ratio to the floor's median.

Goals (issue 7): eval <= 5x the floor, cdi generate <= 4x, doctor <= 300 ms.
"""

from __future__ import annotations

import argparse
import atexit
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
sys.path.insert(0, str(REPO / "tests" / "containers"))

GOALS = {"eval": ("ratio", 5.0), "cdi generate": ("ratio", 4.0), "doctor": ("ms", 300.0)}


def _run(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode not in (0, 1):  # doctor exits 1 when it found problems
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=21, help="rounds (default: 21)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--tiny", action="store_true", help="2 rounds: the CI smoke test of this script")
    args = parser.parse_args()
    rounds = 2 if args.tiny else args.n

    import cdi_fakes as fakes  # tests/containers/cdi_fakes.py

    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    atexit.register(shutil.rmtree, work, True)  # the fake machine and the spec: nothing left in /tmp
    fake = fakes.golden_machine(work)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    py = sys.executable
    commands = {
        "python -I -c pass (floor)": [py, "-I", "-c", "pass"],
        "eval": [py, "-m", "cudapkgs", "eval", "cudaPackages.cudaMajorMinorVersion"],
        "cdi generate": [py, "-m", "cudapkgs", "cdi", "generate", *fake.cli_args(), "--gpu-discovery", "proc",
                         "--output", str(work / "spec.json")],
        "doctor": [py, "-m", "cudapkgs", "doctor"],
    }
    for command in commands.values():  # warm-up: bytecode written, files cached
        _run(command, env)
    samples: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(rounds):
        for label, command in commands.items():
            samples[label].append(_run(command, env))
    floor = statistics.median(samples["python -I -c pass (floor)"])
    rows = []
    for label, values in samples.items():
        median = statistics.median(values)
        goal = GOALS.get(label)
        if goal is None:
            verdict = "peer"
        elif goal[0] == "ratio":
            verdict = f"≤ {goal[1]:g}×: {'met' if median / floor <= goal[1] else 'NOT met'}"
        else:
            verdict = f"≤ {goal[1]:g} ms: {'met' if median <= goal[1] else 'NOT met'}"
        rows.append({"what": label, "median_ms": round(median, 1), "min_ms": round(min(values), 1),
                     "max_ms": round(max(values), 1), "ratio": round(median / floor, 2), "goal": verdict})
    print(f"start-up, {rounds} interleaved rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
    print()
    print("| command | median ms | min ms | max ms | × floor | goal |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['what']} | {r['median_ms']} | {r['min_ms']} | {r['max_ms']} | {r['ratio']}× | {r['goal']} |")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
