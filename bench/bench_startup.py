"""Start-up: whole `cudapkgs` processes against the interpreter floor, measured side by side.

    python bench/bench_startup.py            # 21 rounds
    python bench/bench_startup.py -n 41 --json
    python bench/bench_startup.py --tiny     # 2 rounds: the CI smoke test of this script
    python bench/bench_startup.py -n 21 --peer-src /path/to/other/checkout/src   # this tree against another

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

With ``--peer-src DIR`` every command also runs from the cudapkgs of another checkout
(``PYTHONPATH=DIR``: the layout before a move, say), right next to this tree's run in the same
round, the order of the two swapped every round; a second table gives both medians, wall
and CPU (user + system of the child, from ``getrusage``), and this tree's ratio to the peer.

Goals (issue 7): eval <= 5x the floor, cdi generate <= 4x, doctor <= 300 ms.
"""

from __future__ import annotations

import argparse
import atexit
import json
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
sys.path.insert(0, str(REPO / "tests" / "containers"))

GOALS = {"eval": ("ratio", 5.0), "cdi generate": ("ratio", 4.0), "doctor": ("ms", 300.0)}


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One run of `command`: (wall ms, CPU ms of the child)."""
    cpu = _cpu_children()
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode not in (0, 1):  # doctor exits 1 when it found problems
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, (_cpu_children() - cpu) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=21, help="rounds (default: 21)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--tiny", action="store_true", help="2 rounds: the CI smoke test of this script")
    parser.add_argument("--peer-src", metavar="DIR", type=Path,
                        help="also run every command from the cudapkgs package in DIR (another checkout's src)")
    args = parser.parse_args()
    rounds = 2 if args.tiny else args.n
    if args.peer_src is not None and not (args.peer_src / "cudapkgs" / "__init__.py").is_file():
        parser.error(f"--peer-src {args.peer_src}: no cudapkgs/__init__.py there (give the src directory of a checkout)")

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
    peer_env = None
    if args.peer_src is not None:
        peer_env = dict(env, PYTHONPATH=str(args.peer_src.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    floor_label = "python -I -c pass (floor)"
    for label, command in commands.items():  # warm-up: bytecode written, files cached
        _run(command, env)
        if peer_env is not None and label != floor_label:
            _run(command, peer_env)
    samples: dict[str, list[float]] = {label: [] for label in commands}
    cpu: dict[str, list[float]] = {label: [] for label in commands}
    peer: dict[str, list[tuple[float, float]]] = {label: [] for label in commands if label != floor_label}
    for round_ in range(rounds):
        for label, command in commands.items():
            if peer_env is None or label == floor_label:
                wall, used = _run(command, env)
            elif round_ % 2:
                peer[label].append(_run(command, peer_env))
                wall, used = _run(command, env)
            else:
                wall, used = _run(command, env)
                peer[label].append(_run(command, peer_env))
            samples[label].append(wall)
            cpu[label].append(used)
    floor = statistics.median(samples[floor_label])
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
                     "max_ms": round(max(values), 1), "ratio": round(median / floor, 2), "goal": verdict,
                     "cpu_ms": round(statistics.median(cpu[label]), 1)})
        if peer_env is not None and label in peer:
            peer_wall = statistics.median(w for w, _ in peer[label])
            peer_cpu = statistics.median(c for _, c in peer[label])
            rows[-1].update({"peer_median_ms": round(peer_wall, 1), "peer_cpu_ms": round(peer_cpu, 1)})
    print(f"start-up, {rounds} interleaved rounds, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
    print()
    print("| command | median ms | min ms | max ms | × floor | goal |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['what']} | {r['median_ms']} | {r['min_ms']} | {r['max_ms']} | {r['ratio']}× | {r['goal']} |")
    if peer_env is not None:
        print()
        print(f"this tree ({REPO / 'src'}) against the peer ({args.peer_src}), same rounds, order swapped each round:")
        print()
        print("| command | wall ms | peer wall ms | wall ratio | CPU ms | peer CPU ms | CPU ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "peer_median_ms" in r:
                print(f"| {r['what']} | {r['median_ms']} | {r['peer_median_ms']} | {r['median_ms'] / r['peer_median_ms']:.3f} "
                      f"| {r['cpu_ms']} | {r['peer_cpu_ms']} | {r['cpu_ms'] / max(r['peer_cpu_ms'], 0.1):.3f} |")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
