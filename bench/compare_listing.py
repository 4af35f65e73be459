"""Are two trees' listings, searches, metas and derivations the same? (issue 34, item 4's check)

Run:  python bench/compare_listing.py --old /tmp/old/src [--new src] [-j 2]

Runs each of `COMMANDS` (`python -m cudapkgs ... --no-eval-cache`) once with each tree's `src`
first on PYTHONPATH and compares exit status, stdout and stderr byte for byte.  Prints one line a
command (same / differs), then, for each that differs, the lines that changed (a unified diff of
stdout and of stderr, rows compared with runs of blanks as one, since a table's columns widen
with their widest cell; for JSON the top-level entries that changed).  Exit status 1 when any
command differs: a change that is meant (rows that change on purpose) is read off the diff, and
the test that pins it is in tests/ (tests/test_list_all_cost.py for the listing's).

The commands are docs/eval-cache.md's ("Checked equal"): every configuration of `list --all`
the listing has (table, JSON, unfree, the CUDA predicate, aarch64-linux, capabilities, fetchers,
aliases, cudaSupport), `list`, `search`, `meta` of the companions, and the `drvPath` of each
kind of package (rewired wheels, plain wheels, a source build, redistributables, NVIDIA's
wheels, the host tools).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNFREE = ["--set", "allowUnfree=true"]
CUDA = [*UNFREE, "--set", "cudaSupport=true"]

COMMANDS: list[list[str]] = [
    ["list", "--all"],
    ["list", "--all", "--json"],
    ["list", "--all", *UNFREE],
    ["list", "--all", "--set", 'allowUnfreePredicate="cuda"'],
    ["list", "--all", "--set", "cudaSupport=true"],
    ["list", "--all", "--system", "aarch64-linux"],
    ["list", "--all", "--json", "--system", "aarch64-linux", *UNFREE],
    ["list", "--all", "--set", 'cudaCapabilities=["8.6"]'],
    ["list", "--all", "--set", 'fetchers=["wheels"]'],
    ["list", "--all", "--set", "allowAliases=false"],
    ["list", "--json"],
    ["list", "cudaPackages_12_6"],
    ["search", "torch"],
    ["search", "--json", "cublas"],
    ["eval", "--json", "python3Packages.torchvision.meta"],
    ["eval", "--json", "cudaPackages_13_0.pkgs.python3Packages.torchvision.meta"],
    ["eval", "--json", "cudaPackages.cudnn-frontend.meta"],
    *[["eval", *CUDA, f"{top}python3Packages.{name}.drvPath"]
      for name in ("torch", "torchvision", "torchaudio") for top in ("cudaPackages_13_0.pkgs.", "cudaPackages_12_8.pkgs.")],
    ["eval", *CUDA, "cudaPackages_13_0.pkgs.python3Packages.jax-cuda13-plugin.drvPath"],
    ["eval", *CUDA, "python3Packages.cupy.drvPath"],
    ["eval", *CUDA, "cudaPackages_13_0.pkgs.python3Packages.onnxruntime.drvPath"],
    ["eval", *UNFREE, "cudaPackages.nccl.drvPath"],
    ["eval", *UNFREE, "cudaPackages.libnvshmem.drvPath"],
    ["eval", *CUDA, "python3Packages.pycuda.drvPath"],
    ["eval", "python3Packages.opencv4.drvPath"],
    ["eval", *CUDA, "python3Packages.opencv4.drvPath"],
    ["eval", "python3Packages.numpy.drvPath"],
    ["eval", "python312Packages.jax.drvPath"],
    ["eval", *UNFREE, "cudaPackages.libcublas.drvPath"],
    ["eval", *UNFREE, "cudaPackages.saxpy.drvPath"],
    ["eval", "zlib.drvPath"],
]


def run(src: Path, args: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``python -m cudapkgs <args> --no-eval-cache`` with `src`
    first on PYTHONPATH (the evaluation cache neither read nor written)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(src.resolve()), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "cudapkgs", *args, "--no-eval-cache"], env=env,
                          capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout, done.stderr


def json_entries(text: str) -> dict[str, str] | None:
    """Top-level entries of a JSON listing (key -> its JSON text), or None when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict):
        return {str(k): json.dumps(v, sort_keys=True) for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        keyed = {}
        for i, v in enumerate(value):
            keyed[str(v.get("attribute", v.get("attrPath", v.get("name", i))))] = json.dumps(v, sort_keys=True)
        return keyed
    return None


def differences(old: tuple[int, str, str], new: tuple[int, str, str]) -> list[str]:
    """What changed from `old` to `new` (exit status, stdout, stderr): lines to print."""
    lines = []
    if old[0] != new[0]:
        lines.append(f"  exit status {old[0]} -> {new[0]}")
    for name, a, b in (("stdout", old[1], new[1]), ("stderr", old[2], new[2])):
        if a == b:
            continue
        before, after = json_entries(a), json_entries(b)
        if before is not None and after is not None:
            for key in sorted(set(before) | set(after)):
                if before.get(key) != after.get(key):
                    lines.append(f"  {name} {key}:\n    - {before.get(key)}\n    + {after.get(key)}")
            continue
        # A table's columns are as wide as their widest cell: a changed row can move every row's
        # spaces, so rows are compared with runs of blanks as one, and a width change said once.
        before_rows, after_rows = ([" ".join(row.split()) for row in t.splitlines()] for t in (a, b))
        if before_rows == after_rows:
            lines.append(f"  {name}: only the column widths (runs of blanks) differ")
            continue
        lines += [f"  {name} {line}" for line in difflib.unified_diff(before_rows, after_rows, lineterm="", n=0)
                  if not line.startswith(("---", "+++", "@@"))]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the src directory of the tree before")
    parser.add_argument("--new", type=Path, default=HERE.parent / "src", help="the src directory after (this checkout's)")
    parser.add_argument("-j", type=int, default=2, help="commands run at once")
    args = parser.parse_args()
    for src in (args.old, args.new):
        if not (src / "cudapkgs" / "__init__.py").is_file():
            parser.error(f"{src}: no cudapkgs/__init__.py there (give a checkout's src directory)")
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        old = list(pool.map(lambda c: run(args.old, c), COMMANDS))
        new = list(pool.map(lambda c: run(args.new, c), COMMANDS))
    differ = 0
    for command, before, after in zip(COMMANDS, old, new):
        lines = differences(before, after)
        differ += bool(lines)
        print(f"{'DIFFERS' if lines else 'same   '} cudapkgs {' '.join(command)} (exit {after[0]})")
        for line in lines:
            print(line)
    print(f"\n{len(COMMANDS) - differ} of {len(COMMANDS)} commands the same, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
