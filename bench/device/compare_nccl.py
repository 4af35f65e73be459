"""Bus bandwidth of all_reduce_perf against two NCCL builds, side by side, from nccl-tests logs.

usage: python bench/device/compare_nccl.py DIR       (DIR holds ours-N.log and nvidia-N.log)
       python bench/device/compare_nccl.py --tiny    (parses the sample logs in tests/data/nccl)

For each message size it prints the out-of-place and in-place bus bandwidth (GB/s, nccl-tests'
`busbw`: algorithm bandwidth x 2(n-1)/n for all-reduce), the best of the rounds for each build,
and ours/NVIDIA's; it fails (exit 1) when any row of any log reports a wrong value (#wrong != 0)
or a log has no result rows. `--json` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
VERSION = re.compile(r"NCCL version (\S+)")


class LogError(ValueError):
    """A log without results, or with wrong values."""


def parse(path: Path) -> dict:
    """{"version": str|None, "rows": {size: (oop_busbw, ip_busbw)}}; raises LogError on #wrong != 0."""
    rows, version = {}, None
    for line in path.read_text(errors="replace").splitlines():
        if version is None and (m := VERSION.search(line)):
            version = m.group(1)
        if m := ROW.match(line):
            size = int(m.group(1))
            if m.group(9) != "0" or m.group(13) != "0":
                raise LogError(f"{path}: {size} bytes: #wrong {m.group(9)} / {m.group(13)}")
            rows[size] = (float(m.group(8)), float(m.group(12)))
    if not rows:
        raise LogError(f"{path}: no result rows")
    return {"version": version, "rows": rows}


def best(logs: list[dict]) -> dict[int, tuple[float, float]]:
    sizes = sorted(set().union(*(log["rows"] for log in logs)))
    return {s: tuple(max(log["rows"][s][i] for log in logs if s in log["rows"]) for i in (0, 1)) for s in sizes}


def compare(directory: Path) -> dict:
    ours = [parse(p) for p in sorted(directory.glob("ours-*.log"))]
    theirs = [parse(p) for p in sorted(directory.glob("nvidia-*.log"))]
    if not ours or not theirs:
        raise LogError(f"{directory}: needs ours-N.log and nvidia-N.log")
    a, b = best(ours), best(theirs)
    rows = [{"bytes": s, "ours_oop": a[s][0], "nvidia_oop": b[s][0], "ours_ip": a[s][1], "nvidia_ip": b[s][1],
             "ratio_oop": a[s][0] / b[s][0], "ratio_ip": a[s][1] / b[s][1]} for s in sorted(set(a) & set(b))]
    return {"ours_version": ours[0]["version"], "nvidia_version": theirs[0]["version"],
            "rounds": [len(ours), len(theirs)], "rows": rows}


def table(result: dict) -> str:
    lines = [f"NCCL: ours {result['ours_version']}, NVIDIA's {result['nvidia_version']}; best of "
             f"{result['rounds'][0]}/{result['rounds'][1]} rounds; bus bandwidth in GB/s",
             f"{'size':>10} | {'ours oop':>9} {'NVIDIA oop':>10} {'ratio':>6} | {'ours ip':>8} {'NVIDIA ip':>9} {'ratio':>6}"]
    for r in result["rows"]:
        size = f"{r['bytes'] // 2**20} MiB" if r["bytes"] < 2**30 else f"{r['bytes'] // 2**30} GiB"
        lines.append(f"{size:>10} | {r['ours_oop']:>9.2f} {r['nvidia_oop']:>10.2f} {r['ratio_oop']:>6.3f} | "
                     f"{r['ours_ip']:>8.2f} {r['nvidia_ip']:>9.2f} {r['ratio_ip']:>6.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--tiny", action="store_true", help="the sample logs in tests/data/nccl")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    directory = Path(__file__).resolve().parents[2] / "tests" / "data" / "nccl" if args.tiny else args.directory
    if directory is None:
        parser.error("give a directory or --tiny")
    try:
        result = compare(directory)
    except (LogError, OSError) as error:
        print(f"compare_nccl: {error}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
