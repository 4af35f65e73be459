"""Check and compare torch_distributed.py runs: the store's torch against a peer, DDP against one process.

usage: python bench/device/compare_torch_distributed.py DIR [--store STOREDIR] [--json]
       python bench/device/compare_torch_distributed.py --tiny   (the sample runs in tests/data/torch_distributed)

DIR holds ``ours-N/`` and ``peer-N/`` (one folder a round, each with ``rank-R.json`` from
bench/device/torch_distributed.py) and optionally ``reference.json`` (its ``--reference`` run) and
``reference-peer.json``. Checks, each a failure (exit 1) when it does not hold:

* every rank of every round: the all_reduce result exact (``wrong == 0``);
* ours: in every rank exactly one libnccl and one libcudart mapped, each under STOREDIR when given;
  torch itself imported from under STOREDIR;
* DDP: the mean loss of each step and the final parameter sums equal the one-process reference within
  ``rtol = 1e-4`` (float32 arithmetic in a different order: all-reduced gradients);
* the ranks of a round agree on the parameters (DDP keeps replicas identical).

Prints per round the bus bandwidth (rank 0's median over its timed iterations; GB/s), the median of the
rounds for each side and ours / peer.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

RTOL = 1e-4
TINY = Path(__file__).resolve().parents[2] / "tests" / "data" / "torch_distributed"


class RunError(ValueError):
    """A run whose results are wrong or missing."""


def load_round(folder: Path) -> list[dict]:
    ranks = sorted(folder.glob("rank-*.json"))
    if not ranks:
        raise RunError(f"{folder}: no rank-N.json")
    records = [json.loads(p.read_text()) for p in ranks]
    world = records[0]["world"]
    if len(records) != world:
        raise RunError(f"{folder}: {len(records)} rank files for a world of {world}")
    return records


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=RTOL, abs_tol=1e-6) for x, y in zip(a, b))


def check_round(folder: Path, records: list[dict], store: str | None, ours: bool, reference: dict | None) -> list[str]:
    """The problems of one round (empty when every check holds)."""
    problems = []
    for r in records:
        where = f"{folder.name}/rank-{r['rank']}"
        if r["allreduce"]["wrong"]:
            problems.append(f"{where}: all_reduce wrong in {r['allreduce']['wrong']} elements")
        if ours:
            for stem in ("libnccl", "libcudart"):
                paths = r["libraries"].get(stem, [])
                if r["backend"] == "nccl" or stem == "libcudart":
                    if len(paths) != 1:
                        problems.append(f"{where}: {len(paths)} {stem} mapped ({paths}), expected one")
                if store and any(not p.startswith(store.rstrip("/") + "/") for p in paths):
                    problems.append(f"{where}: {stem} from outside the store: {paths}")
            if store and not r["torch_file"].startswith(store.rstrip("/") + "/"):
                problems.append(f"{where}: torch imported from {r['torch_file']}, not the store")
        if not close(r["checksum"], records[0]["checksum"]):
            problems.append(f"{where}: parameters differ from rank 0's")
    if reference is not None:
        if not close(records[0]["losses"], reference["losses"]):
            problems.append(f"{folder.name}: DDP losses {records[0]['losses']} != one process's {reference['losses']}")
        if not close(records[0]["checksum"], reference["checksum"]):
            problems.append(f"{folder.name}: DDP parameters differ from one process's")
    return problems


def compare(directory: Path, store: str | None = None) -> dict:
    """{"rounds": [...], "ours_busbw", "peer_busbw", "ratio", "problems": [...]} for DIR."""
    reference = json.loads((directory / "reference.json").read_text()) if (directory / "reference.json").exists() else None
    rounds, problems = [], []
    for side in ("ours", "peer"):
        folders = [p for p in directory.glob(f"{side}-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
        for folder in sorted(folders, key=lambda p: int(p.name.split("-")[-1])):
            records = load_round(folder)
            problems += check_round(folder, records, store, side == "ours", reference)
            head = records[0]
            rounds.append({"side": side, "round": folder.name, "busbw_GBps": head["allreduce"]["busbw_GBps"],
                           "bytes": head["allreduce"]["bytes"], "world": head["world"],
                           "nccl": head.get("nccl_version"), "torch": head["torch_version"],
                           "libnccl": head["libraries"].get("libnccl", []),
                           "libcudart": head["libraries"].get("libcudart", [])})
    ours = [r["busbw_GBps"] for r in rounds if r["side"] == "ours"]
    peer = [r["busbw_GBps"] for r in rounds if r["side"] == "peer"]
    if not ours:
        problems.append(f"{directory}: no ours-N round")
    result = {"rounds": rounds, "problems": problems, "reference": reference is not None,
              "ours_busbw": statistics.median(ours) if ours else None,
              "peer_busbw": statistics.median(peer) if peer else None}
    result["ratio"] = result["ours_busbw"] / result["peer_busbw"] if ours and peer else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--store", help="the store directory ours must map its libraries from")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="check the sample runs in tests/data/torch_distributed")
    args = parser.parse_args(argv)
    if args.tiny:
        args.directory, args.store = TINY, args.store or "/root/.local/share/cudapkgs/store"
    if args.directory is None:
        parser.error("DIR is required (or --tiny)")
    try:
        result = compare(args.directory, args.store)
    except (RunError, OSError, KeyError, json.JSONDecodeError) as error:
        print(f"compare_torch_distributed: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in result["rounds"]:
            print(f"{r['round']:>8}  {r['bytes'] / 2**20:7.0f} MiB x{r['world']}  busbw {r['busbw_GBps']:8.2f} GB/s  "
                  f"torch {r['torch']}  nccl {r['nccl']}  {r['libnccl'][:1]}")
        if result["ratio"] is not None:
            print(f"median busbw: ours {result['ours_busbw']:.2f} GB/s, peer {result['peer_busbw']:.2f} GB/s, "
                  f"ours/peer {result['ratio']:.3f}")
        print("DDP against one process:", "checked" if result["reference"] else "no reference.json")
        for problem in result["problems"]:
            print("PROBLEM:", problem, file=sys.stderr)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
