"""Benchmark `cudapkgs cdi generate`: whole process vs. in process, and nvidia-ctk when installed.

    python bench/bench_cdi.py            # on a fake one-GPU machine built in a temp dir
    python bench/bench_cdi.py --real     # on this machine's real GPUs and driver
    python bench/bench_cdi.py -n 41 --json

Prints a Markdown table of medians (and min/max) over N runs.  The spec is
generated at every boot, so the whole-process number is the one that counts
(budget: 300 ms on a one-GPU machine).
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
sys.path.insert(0, str(REPO / "tests" / "containers"))


def _times(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def _row(label: str, samples: list[float] | None, note: str = "") -> dict:
    if not samples:
        return {"what": label, "median_ms": None, "min_ms": None, "max_ms": None, "note": note}
    return {
        "what": label,
        "median_ms": round(statistics.median(samples), 1),
        "min_ms": round(min(samples), 1),
        "max_ms": round(max(samples), 1),
        "note": note,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=21, help="runs per measurement (default: 21)")
    parser.add_argument("--real", action="store_true", help="use this machine's GPUs instead of a fake one-GPU machine")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    parser.add_argument("--tiny", action="store_true", help="one run per row: the CI smoke test of this script")
    args = parser.parse_args()
    if args.tiny:
        args.n = 1

    from cudapkgs.containers.fsutil import atomic_write
    from cudapkgs.containers.generate import Options, generate

    work = Path(tempfile.mkdtemp(prefix="bench-cdi-"))
    if args.real:
        cli_args: list[str] = []
        options = Options()
        machine = "this machine (real driver)"
    else:
        import cdi_fakes as fakes  # tests/containers/cdi_fakes.py

        fake = fakes.golden_machine(work)
        cli_args = [*fake.cli_args(), "--gpu-discovery", "proc"]
        options = Options(driver_root=str(fake.root), procfs=str(fake.procfs), sysfs=str(fake.sysfs), discovery="proc")
        machine = "fake one-GPU machine (proc/sysfs discovery)"
    out = work / "spec.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))

    rows = []
    command = [sys.executable, "-m", "cudapkgs", "cdi", "generate", *cli_args, "--output", str(out)]
    subprocess.run(command, env=env, check=True, capture_output=True)  # warm the page cache
    rows.append(_row("whole process: python -m cudapkgs cdi generate -o FILE", _times(lambda: subprocess.run(command, env=env, check=True, capture_output=True), args.n)))
    script = shutil.which("cudapkgs")
    if script:
        command2 = [script, "cdi", "generate", *cli_args, "--output", str(out)]
        rows.append(_row("whole process: cudapkgs cdi generate -o FILE (console script)", _times(lambda: subprocess.run(command2, env=env, check=True, capture_output=True), args.n)))
    baseline = [sys.executable, "-c", "pass"]
    rows.append(_row("python -c pass (interpreter start-up, for reference)", _times(lambda: subprocess.run(baseline, check=True), args.n)))
    rows.append(_row("in process: generate() + encode + atomic write", _times(lambda: atomic_write(out, generate(options).text("json")), args.n)))
    ctk = shutil.which("nvidia-ctk")
    if ctk:
        ctk_cmd = [ctk, "cdi", "generate", "--format", "json", "--output", str(work / "ctk.json")]
        if not args.real:
            ctk_cmd += ["--driver-root", str(fake.root)]
        rows.append(_row("nvidia-ctk cdi generate", _times(lambda: subprocess.run(ctk_cmd, check=False, capture_output=True), args.n)))
    else:
        rows.append(_row("nvidia-ctk cdi generate", None, "not installed on this machine: not measured"))

    print(f"machine: {machine}; runs: {args.n}; python {sys.version.split()[0]}")
    print()
    print("| what | median ms | min ms | max ms | note |")
    print("| --- | ---: | ---: | ---: | --- |")
    for row in rows:
        cells = ["-" if row[k] is None else str(row[k]) for k in ("median_ms", "min_ms", "max_ms")]
        print(f"| {row['what']} | {' | '.join(cells)} | {row['note']} |")
    if args.json:
        print(json.dumps(rows, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
