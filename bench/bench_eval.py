"""Evaluation speed: CLI start-up and evaluating every attribute of every package set.

Run:  python bench/bench_eval.py [--runs 21]    (the vendored manifests, or $CUDAPKGS_MANIFESTS)
      python bench/bench_eval.py --tiny         (one run per row: the CI smoke test)
      python bench/bench_eval.py --cold-only --runs 21 --peer-src /tmp/main/src
                                                (the cold table alone, with another checkout's rows)
      python bench/bench_eval.py --cold-only --instructions   (and each cold row's instructions)

Prints four tables. Peers run in the same process/run for ratios:
- start-up: `cudapkgs eval cudaPackages.cudaMajorMinorVersion` against the bare
  interpreter (`python -c pass`) and `nix eval` when nix is installed;
- full evaluation: every attribute of every package of every set plus every
  pkgsForCudaArch variant's default set, against the floor of reading and
  json-parsing every manifest file once;
- cold (issue 34, item 4: eval and `list --all` with no evaluation cache, goal <= 3x the
  interpreter floor): `python -I -c pass` (the floor of docs/bench-speed.md), `python -c pass`
  (with site and the venv's .pth files, which the command cannot skip), `cudapkgs eval
  --no-eval-cache cudaPackages.cudaMajorMinorVersion` and `cudapkgs list --all
  --no-eval-cache`, whole processes (`python -m cudapkgs`, byte code cached), in alternating
  rounds: medians of wall and CPU (user + system, getrusage), ratios to the `-I` floor, and
  the load average (/proc/loadavg) before and after; `--peer-src DIR` adds the two cudapkgs
  rows run from another checkout's `src` (PYTHONPATH, byte code cached too: `git archive main
  src`), in the same rounds; `--instructions` adds each cold row's instructions counted by
  `valgrind --tool=callgrind` (one run each: a count the load does not move, unlike time; it
  weighs memory and system calls as nothing, so its ratios are not the time's);
- where a cold `list --all` spends its time, in one process: the first `list_all` (its
  imports, the manifests parsed, the evaluation), then the evaluation alone again with every
  module imported and every manifest parsed (the top level's memo cleared: `top_level._TOP_LEVELS`),
  and with the manifests parsed again too (min and median of 5).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wall(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def startup(runs: int) -> list[tuple[str, float]]:
    cudapkgs = shutil.which("cudapkgs", path=os.path.dirname(sys.executable)) or shutil.which("cudapkgs")
    rows = [
        ("python -c pass (interpreter floor)", wall([sys.executable, "-c", "pass"], runs)),
        ("cudapkgs eval cudaPackages.cudaMajorMinorVersion", wall([cudapkgs, "eval", "cudaPackages.cudaMajorMinorVersion"], runs)),
        ("cudapkgs eval --json cudaPackages_12_8.cudnn.version", wall([cudapkgs, "eval", "--json", "cudaPackages_12_8.cudnn.version"], runs)),
    ]
    peer, _ = nix_peer()
    if peer:
        rows.append(("nix eval nixpkgs#cudaPackages.cudaMajorMinorVersion", wall(peer, runs)))
    return rows


@functools.cache
def nix_peer() -> tuple[list[str] | None, str]:
    """The `nix eval` command of the peer row and "", or None and why it cannot run here.

    Installed is not enough: Debian's Nix 2.8 has the nix-command feature off (given here with
    --extra-experimental-features) and no `<nixpkgs>` on a machine without a channel; the peer
    is tried once (2 minutes at most) and left out, with the reason, when it fails.
    """
    nix = shutil.which("nix")
    if nix is None:
        return None, "nix is not installed here"
    cmd = [nix, "--extra-experimental-features", "nix-command", "eval", "--impure", "--expr",
           "(import <nixpkgs> {}).cudaPackages.cudaMajorMinorVersion"]
    try:
        probe = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"`nix eval` did not answer ({error})"
    if probe.returncode != 0:
        reason = next((line.strip() for line in probe.stderr.splitlines() if line.strip()), f"exit status {probe.returncode}")
        return None, f"`nix eval` cannot evaluate nixpkgs here: {reason}"
    return cmd, ""


def evaluate_everything() -> dict[str, float | int]:
    """Every attribute of every package of every set and of every pkgsForCudaArch default set."""
    import cudapkgs
    import cudapkgs.manifests.locate as manifests  # where load_manifest looks parse_manifest up
    from cudapkgs.errors import CudapkgsError
    from cudapkgs.package import Package

    parses: dict[str, int] = {}
    real_parse = manifests.parse_manifest

    def counting_parse(data, *, product, version, source):
        parses[source] = parses.get(source, 0) + 1
        return real_parse(data, product=product, version=version, source=source)

    manifests.parse_manifest = counting_parse
    start = time.perf_counter()
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True}, system="x86_64-linux")
    scopes = [pkgs[name] for name in pkgs if name.startswith("cudaPackages_") and name.count("_") == 2]
    scopes += [pkgs.pkgsForCudaArch[arch].cudaPackages for arch in pkgs.pkgsForCudaArch]
    attributes = errors = packages = 0
    for scope in scopes:
        for name in scope:
            try:
                value = scope[name]
            except CudapkgsError:
                errors += 1
                continue
            if not isinstance(value, Package):
                continue
            packages += 1
            for attr in value:
                attributes += 1
                try:
                    item = value[attr]
                    if attr == "meta":
                        for key in item:
                            item[key]
                except CudapkgsError:
                    errors += 1
    elapsed = time.perf_counter() - start
    manifests.parse_manifest = real_parse
    return {
        "seconds": elapsed,
        "sets": len(scopes),
        "packages": packages,
        "attributes": attributes,
        "errors": errors,
        "files parsed": len(parses),
        "max parses per file": max(parses.values(), default=0),
    }


def _cpu_children_ms() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


COLD_ROWS = [
    ("python -I -c pass (the floor)", ["-I", "-c", "pass"]),
    ("python -c pass (with site)", ["-c", "pass"]),
    ("cudapkgs eval --no-eval-cache cudaPackages.cudaMajorMinorVersion",
     ["-m", "cudapkgs", "eval", "--no-eval-cache", "cudaPackages.cudaMajorMinorVersion"]),
    ("cudapkgs list --all --no-eval-cache", ["-m", "cudapkgs", "list", "--all", "--no-eval-cache"]),
]


def cold_rows(peer_src: Path | None = None) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, interpreter arguments, environment) of each cold row: `COLD_ROWS`, then with
    `peer_src` the cudapkgs rows again with that directory first on PYTHONPATH ("peer")."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if peer_src is None:
        return [(label, argv, env) for label, argv in COLD_ROWS]

    def first(src: Path) -> dict[str, str]:
        return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(src.resolve()), env.get("PYTHONPATH")) if p)}

    # With a peer, this checkout's cudapkgs rows come first on PYTHONPATH too: both search one more
    # directory for every top-level import, as the peer's PYTHONPATH makes it.
    own = first(HERE.parent / "src")
    rows = [(label, argv, own if argv[:2] == ["-m", "cudapkgs"] else env) for label, argv in COLD_ROWS]
    return rows + [(f"{label}, peer", argv, first(peer_src)) for label, argv in COLD_ROWS if argv[:2] == ["-m", "cudapkgs"]]


def cold(runs: int, peer_src: Path | None = None) -> tuple[list[tuple[str, float, float]], list[str], list[str]]:
    """(label, median wall ms, median CPU ms) of each `cold_rows` command, in alternating rounds
    (two warm-up rounds first: byte code written, host probes remembered), and the load average
    before and after."""
    commands = cold_rows(peer_src)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in commands}
    for _ in range(2):  # byte code written, host probes remembered
        for _label, argv, env in commands:
            subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)
    before = open("/proc/loadavg").read().split()[:3]
    for _ in range(runs):
        for label, argv, env in commands:
            cpu = _cpu_children_ms()
            start = time.perf_counter()
            subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)
            times[label].append(((time.perf_counter() - start) * 1000, _cpu_children_ms() - cpu))
    after = open("/proc/loadavg").read().split()[:3]
    rows = [(label, statistics.median(w for w, _ in runs_), statistics.median(c for _, c in runs_))
            for label, runs_ in times.items()]
    return rows, before, after


def instructions(peer_src: Path | None = None) -> list[tuple[str, int]] | str:
    """(label, instructions) of each `cold_rows` command, one run each under ``valgrind
    --tool=callgrind`` (user-space instructions, the dynamic loader's included; the kernel's not),
    or why there are none (valgrind absent)."""
    import re
    import tempfile

    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return "valgrind is not installed here"
    found = []
    with tempfile.TemporaryDirectory(prefix="bench-eval-callgrind-") as tmp:
        for label, argv, env in cold_rows(peer_src):
            out = os.path.join(tmp, "callgrind.out")
            done = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *argv],
                                  env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            counted = re.search(r"Collected : (\d+)", done.stderr)
            if counted is None:
                return f"callgrind printed no count for {label!r}"
            found.append((label, int(counted.group(1))))
    return found


SPLIT = """
import gc, json, sys, time
gc.set_threshold(100_000)  # as the command runs (cli.YOUNG_GC_THRESHOLD)
start = time.process_time()
import cudapkgs
import cudapkgs.manifests.locate as locate
import cudapkgs.top_level as tl
from cudapkgs.inventory import list_all
imported = time.process_time()

def once(parse_again):
    tl._TOP_LEVELS.clear()
    if parse_again:
        locate._PARSED.clear()
    began = time.process_time()
    list_all(cudapkgs.import_pkgs(system="x86_64-linux"))
    return (time.process_time() - began) * 1000

first = once(False)
alone = sorted(once(False) for _ in range(5))
parsed = sorted(once(True) for _ in range(5))
print(json.dumps({"modules": len(sys.modules), "first": first, "alone": alone, "parsed": parsed,
                  "import": (imported - start) * 1000}))
"""


def list_all_split() -> dict[str, object]:
    """`SPLIT` run in a fresh process: where a cold `list --all`'s `list_all` spends its time."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-c", SPLIT], env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def manifest_floor(directory: Path) -> float:
    start = time.perf_counter()
    for path in sorted(directory.glob("*/redistrib_*.json")):
        json.loads(path.read_bytes())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21, help="runs per whole-process measurement (median)")
    parser.add_argument("--tiny", action="store_true", help="one run per row: the CI smoke test of this script")
    parser.add_argument("--cold-only", action="store_true", help="the cold table (and its split) alone")
    parser.add_argument("--peer-src", metavar="DIR", type=Path,
                        help="another checkout's src directory: its cudapkgs rows in the cold table's rounds")
    parser.add_argument("--instructions", action="store_true",
                        help="each cold row's instructions too (valgrind --tool=callgrind, one run each)")
    args = parser.parse_args()
    if args.tiny:
        args.runs = 1
    if args.peer_src is not None and not (args.peer_src / "cudapkgs" / "__init__.py").is_file():
        parser.error(f"--peer-src {args.peer_src}: no cudapkgs/__init__.py there (give the src directory of a checkout)")
    if not args.cold_only:
        start_up_and_everything(args.runs)
    cold_tables(args.runs, args.peer_src, args.instructions)


def start_up_and_everything(runs: int) -> None:
    from cudapkgs.manifests import manifests_directory

    manifests_dir = os.environ.get("CUDAPKGS_MANIFESTS") or manifests_directory()

    print(f"## Start-up (median of {runs} whole-process runs)\n")
    rows = startup(runs)
    floor = rows[0][1]
    print("| command | median ms | × interpreter floor |\n|---|---:|---:|")
    for label, seconds in rows:
        print(f"| `{label}` | {seconds * 1000:.1f} | {seconds / floor:.1f} |")
    peer, why_not = nix_peer()
    if peer is None:
        print(f"\n(no `nix eval` row: {why_not}.)")

    result = evaluate_everything()
    floor_s = manifest_floor(Path(manifests_dir))
    print("\n## Every attribute of every package (one process)\n")
    print("| what | seconds | sets | packages | attributes | errors (assertions) | manifest files parsed | max parses per file | × json floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| cudapkgs | {result['seconds']:.3f} | {result['sets']} | {result['packages']} | {result['attributes']} | "
        f"{result['errors']} | {result['files parsed']} | {result['max parses per file']} | {result['seconds'] / floor_s:.1f} |"
    )
    print(f"| json.loads of every manifest file once (floor) | {floor_s:.3f} | | | | | | | 1.0 |")


def cold_tables(runs: int, peer_src: Path | None, counted: bool) -> None:
    rows, before, after = cold(max(runs, 2), peer_src)
    floor_wall, floor_cpu = rows[0][1], rows[0][2]
    print(f"\n## Cold: no evaluation cache (median of {max(runs, 2)} alternating rounds; goal <= 3x the floor)\n")
    print("| command | wall ms | CPU ms | wall × floor | CPU × floor |\n|---|---:|---:|---:|---:|")
    for label, wall_ms, cpu_ms in rows:
        print(f"| `{label}` | {wall_ms:.1f} | {cpu_ms:.1f} | {wall_ms / floor_wall:.2f} | {cpu_ms / floor_cpu:.2f} |")
    print(f"\nload average before {' '.join(before)}, after {' '.join(after)}")
    if counted:
        found = instructions(peer_src)
        print("\n## Cold: instructions (valgrind --tool=callgrind, one run each)\n")
        if isinstance(found, str):
            print(f"(no instruction counts: {found}.)")
        else:
            print("| command | million instructions | × floor |\n|---|---:|---:|")
            for label, count in found:
                print(f"| `{label}` | {count / 1e6:.1f} | {count / found[0][1]:.2f} |")

    split = list_all_split()
    alone, parsed = split["alone"], split["parsed"]
    print("\n## Where a cold `list --all` spends its time (`list_all` in one process, CPU ms)\n")
    print("| part | CPU ms |\n|---|---:|")
    print(f"| `import cudapkgs` and the inventory ({split['modules']} modules in all at the end) | {split['import']:.1f} |")
    print(f"| first `list_all` (its imports, 17 manifests parsed, the evaluation) | {split['first']:.1f} |")
    print(f"| the evaluation alone again (every module imported, manifests parsed), min / median of 5 | "
          f"{alone[0]:.1f} / {alone[len(alone) // 2]:.1f} |")
    print(f"| the evaluation with the manifests parsed again, min / median of 5 | {parsed[0]:.1f} / {parsed[len(parsed) // 2]:.1f} |")


if __name__ == "__main__":
    main()
