"""Evaluation speed: CLI start-up and evaluating every attribute of every package set.

Run:  python bench/bench_eval.py [--runs 21]    (the vendored manifests, or $CUDAPKGS_MANIFESTS)
      python bench/bench_eval.py --tiny         (one run per row: the CI smoke test)

Prints two tables. Peers run in the same process/run for ratios:
- start-up: `cudapkgs eval cudaPackages.cudaMajorMinorVersion` against the bare
  interpreter (`python -c pass`) and `nix eval` when nix is installed;
- full evaluation: every attribute of every package of every set plus every
  pkgsForCudaArch variant's default set, against the floor of reading and
  json-parsing every manifest file once.
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


def manifest_floor(directory: Path) -> float:
    start = time.perf_counter()
    for path in sorted(directory.glob("*/redistrib_*.json")):
        json.loads(path.read_bytes())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21, help="runs per whole-process measurement (median)")
    parser.add_argument("--tiny", action="store_true", help="one run per row: the CI smoke test of this script")
    args = parser.parse_args()
    if args.tiny:
        args.runs = 1
    from cudapkgs.manifests import manifests_directory

    manifests_dir = os.environ.get("CUDAPKGS_MANIFESTS") or manifests_directory()

    print(f"## Start-up (median of {args.runs} whole-process runs)\n")
    rows = startup(args.runs)
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


if __name__ == "__main__":
    main()
