"""No-op build and start-up against Nix and the interpreter floor (issue 24, goal 1), side by side.

    python bench/bench_noop.py             # 21 interleaved rounds
    python bench/bench_noop.py -n 41
    python bench/bench_noop.py --tiny      # 2 rounds: the CI smoke test of this script
    python bench/bench_noop.py -n 9 --peer-src /tmp/main/src   # the cache-off rows of another checkout too

Setup (not timed): a temporary cudapkgs store and user cache dir; ``saxpy_example`` of
examples/packages.py (its CPU build: g++) is built once, so the timed builds are no-ops.
When ``nix-build`` is on PATH, a trivial derivation (``builtin:buildenv``, no builder
process) is built once into a temporary chroot store (``--store DIR``), the peer of the
no-op build.

Each round runs, in turn, whole processes: ``python -I -c pass`` (the interpreter floor),
``nix-build --store DIR … --no-out-link`` (already built), ``cudapkgs build -f
examples/packages.py saxpy_example --no-link`` (already built), ``cudapkgs eval
cudaPackages.cudaMajorMinorVersion``, ``cudapkgs eval --json
cudaPackages.libcublas.outPath`` (allowUnfree) and ``cudapkgs list --all``.  Wall time is
spawn to exit; CPU is the child's user + system time (``getrusage``), steadier than wall on
a loaded machine.  Ratios: the no-op build to nix-build's, the others to the floor; wall and
CPU each.  The host-tool probes are remembered in the user cache dir from the warm-up on
(host/probes.py); ``--cold-probes`` empties that cache before every run instead, the
behaviour before probes were remembered.

The evaluation cache (``$XDG_CACHE_HOME/cudapkgs/eval``, src/cudapkgs/evalcache/) answers the
cudapkgs rows from the second run on; each cudapkgs command also runs as a "cold cache" row,
the evaluation cache emptied before every run of it (the full evaluation plus writing the
entry), and as a "cache off" row (``--no-eval-cache``: the evaluation alone, as before the
cache), in the same rounds; ``--no-cold-rows`` leaves both out.  ``--peer-src DIR`` runs each
"cache off" command also from the cudapkgs in DIR (another checkout's ``src``, e.g. ``git
archive main src``), in the same rounds: rows named "cache off, peer", against the same peer.

Goals (issue 24): no-op build <= 2x nix-build; eval <= 3x the floor; outPath <= 4x;
list --all <= 6x.
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
NIX_EXPR = ('derivation {name="noop"; system=builtins.currentSystem; builder="builtin:buildenv"; '
            'derivations=[]; manifest=builtins.toFile "manifest" "noop";}')
GOALS = {"no-op build": ("nix-build (no-op)", 2.0), "eval attribute": ("floor", 3.0),
         "eval outPath": ("floor", 4.0), "list --all": ("floor", 6.0)}


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One run: (wall ms, CPU ms of the child); exits with the command's error if it failed."""
    cpu = _cpu_children()
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=600)
    wall = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, (_cpu_children() - cpu) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=21, help="rounds (default: 21)")
    parser.add_argument("--tiny", action="store_true", help="2 rounds: the CI smoke test of this script")
    parser.add_argument("--cold-probes", action="store_true",
                        help="empty the remembered host probes before every cudapkgs run")
    parser.add_argument("--no-cold-rows", action="store_true",
                        help="leave out the rows run with the evaluation cache emptied before every run")
    parser.add_argument("--peer-src", metavar="DIR", type=Path,
                        help="also run the cache-off rows from the cudapkgs of another checkout (its src directory)")
    args = parser.parse_args()
    if args.peer_src is not None and not (args.peer_src / "cudapkgs" / "__init__.py").is_file():
        parser.error(f"--peer-src {args.peer_src}: no cudapkgs/__init__.py there (give the src directory of a checkout)")
    if args.peer_src is not None and args.no_cold_rows:
        parser.error("--peer-src runs the cache-off rows: not with --no-cold-rows")
    rounds = 2 if args.tiny else args.n
    work = Path(tempfile.mkdtemp(prefix="bench-noop-"))
    try:
        return _bench(work, rounds, args.cold_probes, args.no_cold_rows, args.peer_src)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _bench(work: Path, rounds: int, cold: bool, no_cold_rows: bool, peer_src: Path | None = None) -> int:
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CUDAPKGS_CONFIG")}
    env.update(PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               XDG_CACHE_HOME=str(work / "cache"), XDG_CONFIG_HOME=str(work / "config"),
               CUDAPKGS_STORE=str(work / "store"))
    cudapkgs = [py, "-m", "cudapkgs"]
    build = [*cudapkgs, "build", "-f", str(REPO / "examples" / "packages.py"), "saxpy_example", "--no-link"]
    commands: dict[str, list[str]] = {"floor": [py, "-I", "-c", "pass"]}
    nix_build = shutil.which("nix-build")
    if nix_build is not None:
        commands["nix-build (no-op)"] = [nix_build, "--store", str(work / "nix"), "--option", "substituters", "",
                                         "-E", NIX_EXPR, "--no-out-link"]
    if shutil.which("g++") is not None:
        commands["no-op build"] = build
    commands["eval attribute"] = [*cudapkgs, "eval", "cudaPackages.cudaMajorMinorVersion"]
    commands["eval outPath"] = [*cudapkgs, "eval", "--json", "--set", "allowUnfree=true",
                                "cudaPackages.libcublas.outPath"]
    commands["list --all"] = [*cudapkgs, "list", "--all"]
    envs = dict.fromkeys(commands, env)
    # The same commands with the evaluation cache emptied before each run. Their own cache
    # directory (probes and data files warm as the others'), so that emptying it leaves the
    # entries of the warm rows alone.
    cold_env = {**env, "XDG_CACHE_HOME": str(work / "cache-cold")}
    if not no_cold_rows:
        warm = [k for k in commands if commands[k][:3] == cudapkgs]
        for label in warm:
            commands[f"{label}, cold cache"] = commands[label]
            envs[f"{label}, cold cache"] = cold_env
        for label in warm:  # the evaluation without the cache's recording: what recording costs
            commands[f"{label}, cache off"] = [*commands[label], "--no-eval-cache"]
            envs[f"{label}, cache off"] = env
        if peer_src is not None:  # the same evaluations by another checkout's cudapkgs
            peer_env = {**env, "PYTHONPATH": str(peer_src.resolve()) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            for label in warm:
                commands[f"{label}, cache off, peer"] = [*commands[label], "--no-eval-cache"]
                envs[f"{label}, cache off, peer"] = peer_env
    for _ in range(2):  # warm-up: the builds done, bytecode written, probes remembered, entries written
        for label, command in commands.items():  # (the second time: inputs written by the first are
            _run(command, envs[label])  # no longer "a moment old", so the entries are kept)
        time.sleep(0.3)
    probes_file = work / "cache" / "cudapkgs" / "probes.json"
    eval_cache = work / "cache-cold" / "cudapkgs" / "eval"
    wall: dict[str, list[float]] = {label: [] for label in commands}
    cpu: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(rounds):
        for label, command in commands.items():
            if cold and command[:3] == cudapkgs:
                probes_file.unlink(missing_ok=True)
                (work / "cache-cold" / "cudapkgs" / "probes.json").unlink(missing_ok=True)
            if label.endswith((", cold cache", ", cache off", ", cache off, peer")):
                shutil.rmtree(eval_cache, ignore_errors=True)
            w, c = _run(command, envs[label])
            wall[label].append(w)
            cpu[label].append(c)
    load = os.getloadavg()
    print(f"no-op build and start-up, {rounds} interleaved rounds, {os.cpu_count()} CPUs, "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, Python {sys.version.split()[0]}, "
          f"probes {'cold (emptied before every run)' if cold else 'remembered'}; "
          "rows named 'cold cache' run with the evaluation cache emptied before every run")
    print()
    print("| command | wall ms (median) | min | max | CPU ms (median) | against | wall × | CPU × | goal |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---|")
    for label in commands:
        w, c = statistics.median(wall[label]), statistics.median(cpu[label])
        against, goal = GOALS.get(label, ("floor" if label != "floor" else "", None))
        if label.endswith((", cold cache", ", cache off", ", cache off, peer")):
            against, goal = GOALS[label.split(", ", 1)[0]][0], None
        if against and against in commands:
            wr = w / statistics.median(wall[against])
            cr = c / max(statistics.median(cpu[against]), 0.1)
            ratios = f"{wr:.2f}× | {cr:.2f}×"
            verdict = "" if goal is None else f"≤ {goal:g}×: wall {'met' if wr <= goal else 'NOT met'}, CPU {'met' if cr <= goal else 'NOT met'}"
        else:
            # no ratio without the peer measured: its cell stays empty too (a row naming a peer has both ratios)
            ratios = "1.00× | 1.00×" if label == "floor" else " | "
            verdict = "peer" if label == "floor" else f"no {against.split()[0]} here"
            against = ""
        print(f"| {label} | {w:.1f} | {min(wall[label]):.1f} | {max(wall[label]):.1f} | {c:.1f} | {against} "
              f"| {ratios} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
