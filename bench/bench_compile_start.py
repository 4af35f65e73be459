"""The byte compiler's start and end as now (`popen_group`, a pidfd) against before (a supervisor, `Popen.wait` polling).

Run:  python bench/bench_compile_start.py [--runs 40] [--modules 10] [--python PATH]
      python bench/bench_compile_start.py --tiny       (two rounds of two modules: tests/test_benches.py)

Each round compiles the same small package (`--modules` modules of a few KiB, as idna or certifi:
`python_bytecode.jobs_for` gives ``-j 1``) with `python_bytecode.compile_tree`, its ``__pycache__``
removed before, once as the code is now (the compiler is cudapkgs' own child, `process_group.popen_group`,
its end seen through a pidfd) and once as before this round (the compiler under `process_group.popen_phase`'s
supervisor, a second Python interpreter, its end seen by `Popen.wait(timeout)`, which sleeps up to 50 ms
between looks: `os.pidfd_open` made to fail), in turn, in this process. Prints per compilation the median wall and CPU (user +
system of the children, from `resource.getrusage(RUSAGE_CHILDREN)`), their ratios, and the load average
before and after. The realisation of the ML environment compiles 21 packages so.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from cudapkgs import process_group  # noqa: E402
from cudapkgs.builders import python_bytecode  # noqa: E402


def make_package(root: Path, modules: int) -> tuple[Path, Path]:
    """(out, site): `modules` modules of about 4 KiB under out/lib/python3/site-packages/pkg."""
    site = root / "out" / "lib" / "python3" / "site-packages"
    pkg = site / "pkg"
    pkg.mkdir(parents=True)
    body = "".join(f"def f{i}(x, y=({i}, 'a{i}')):\n    return [x + k for k in range({i})] or y\n\n" for i in range(50))
    for i in range(modules):
        (pkg / ("__init__.py" if i == 0 else f"m{i}.py")).write_text(body)
    return root / "out", site


def one(out: Path, site: Path, env: dict[str, str], python: str) -> tuple[float, float]:
    shutil.rmtree(site / "pkg" / "__pycache__", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    ok = python_bytecode.compile_tree(site, out, env, io.StringIO(), python)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not ok:
        raise SystemExit("the package did not compile")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-r", "--runs", type=int, default=40)
    parser.add_argument("--modules", type=int, default=10)
    parser.add_argument("--python", default=sys.executable, help="the interpreter that compiles (default: this one)")
    parser.add_argument("--tiny", action="store_true", help="two rounds of two modules (the CI smoke test)")
    args = parser.parse_args()
    if args.tiny:
        args.runs, args.modules = 2, 2
    group, pidfd_open = process_group.popen_group, os.pidfd_open

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError("not in the 'before' row")

    rows: dict[str, tuple[list[float], list[float]]] = {"now: popen_group, pidfd": ([], []),
                                                        "before: popen_phase (supervisor), polling": ([], [])}
    with tempfile.TemporaryDirectory(prefix="bench-compile-start-") as scratch:
        out, site = make_package(Path(scratch), args.modules)
        env = {"PATH": os.environ.get("PATH", "")}
        load_before = os.getloadavg()
        for i in range(args.runs):
            order = list(rows) if i % 2 == 0 else list(rows)[::-1]
            for name in order:
                now = name.startswith("now")
                process_group.popen_group = group if now else process_group.popen_phase  # type: ignore[assignment]
                os.pidfd_open = pidfd_open if now else no_pidfd  # type: ignore[assignment]
                try:
                    wall, cpu = one(out, site, env, args.python)
                finally:
                    process_group.popen_group, os.pidfd_open = group, pidfd_open  # type: ignore[assignment]
                rows[name][0].append(wall)
                rows[name][1].append(cpu)
        load_after = os.getloadavg()
    print(f"{args.runs} alternating compilations of {args.modules} modules each way, {args.python}")
    print("| compiler started by | median wall ms | median CPU ms |\n|---|---:|---:|")
    med = {name: (statistics.median(w) * 1e3, statistics.median(c) * 1e3) for name, (w, c) in rows.items()}
    for name, (w, c) in med.items():
        print(f"| {name} | {w:.1f} | {c:.1f} |")
    (nw, nc), (bw, bc) = med.values()
    print(f"now / before: wall {nw / bw:.2f}x, CPU {nc / bc:.2f}x ({bc - nc:.1f} ms of CPU less per compilation)")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")


if __name__ == "__main__":
    main()
