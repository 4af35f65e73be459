"""`cudapkgs doctor`: print `cudapkgs.doctor.diagnose` for people (or --json for scripts)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .eval import add_store_option


def register(subparsers: Any) -> None:
    """Add `cudapkgs doctor`."""
    p = subparsers.add_parser(
        "doctor",
        help="this machine as cudapkgs sees it: GPUs, driver, libcuda, compilers, store, caches; what to fix",
        description="Look at this machine without building or downloading anything: the NVIDIA GPUs (NVML, else "
        "/proc/driver/nvidia, else the PCI bus), the driver and which CUDA majors it runs, where libcuda.so.1 "
        "comes from for programs built here, whether sets would need cuda_compat, the host compilers and which "
        "sets' nvcc accept them, the system features builds may require, the store and download cache sizes, "
        "and the manifests in use. Each problem found comes with what to do. Exit status 1 when there are problems.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--offline", action="store_true",
                   help="do not probe the fetchers' and source hosts (also $CUDAPKGS_PROBE_HOSTS=0); by default each "
                        "gets one HEAD request with a 4 s deadline, all at once")
    p.add_argument("--config", metavar="FILE", help="read configuration from a TOML file")
    p.add_argument("--set", dest="sets", metavar="KEY=VALUE", action="append", default=[],
                   help="set a configuration key (repeatable), e.g. --set driverLibDir='\"/usr/lib64\"'")
    add_store_option(p)
    p.set_defaults(func=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..doctor import diagnose

    import os

    config = load_config(file=args.config, sets=args.sets)
    if getattr(args, "offline", False) or os.environ.get("CUDAPKGS_PROBE_HOSTS", "").strip().lower() in ("0", "false", "no", "off"):
        report = diagnose(config)
    else:
        from ..fetch.reachability import probe

        report = diagnose(config, probe=probe)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 1 if report.problems else 0
    from ..table import format_size

    out = sys.stdout
    gpus = report.gpus
    if gpus:
        print(f"GPUs ({report.gpu_source}): " + ", ".join(
            f"{g['index']}: {g['name'] or 'NVIDIA GPU'} {g['busId']}" for g in gpus), file=out)
    else:  # not "GPUs (none found): none"
        print("GPUs: none found (NVML, /proc/driver/nvidia, the PCI bus)", file=out)
    print(f"driver: {report.driver or 'none'}", file=out)
    runs = [f"CUDA {major}.x ({'yes' if v['runs'] else 'no'}, needs {v['minimumDriver']})" for major, v in report.runnable.items()]
    print("runs: " + "; ".join(runs), file=out)
    lib = report.libcuda
    print(f"libcuda.so.1 for programs built here: {lib['loadedFrom'] or 'not found'}"
          f"{' (through the ' + lib['loadedThrough'] + ')' if lib['loadedThrough'] else ''}; run path {lib['runpathDir']} "
          f"({lib['runpathDirFrom']}; {'has' if lib['libcudaInRunpathDir'] else 'lacks'} libcuda.so.1); "
          f"ld cache: {lib['ldCache'] or 'none'}", file=out)
    needing = [c["set"] for c in report.compat if c["needsCudaCompat"]]
    print(f"cuda_compat needed by: {', '.join(needing) if needing else 'no set' if report.driver else 'unknown (no driver)'}", file=out)
    print("host compilers:", file=out)
    for c in report.compilers:
        mark = " (default)" if c["default"] else ""
        accepted = ", ".join(c["acceptedByNvccOf"]) or "no set"
        print(f"  {c['kind']} {c['version']} {c['cc']}{mark}: nvcc of CUDA {accepted}", file=out)
    if not report.compilers:
        print("  none", file=out)
    print("backendCC (the compiler nvcc of each CUDA release uses):", file=out)
    for choice in report.backend_compilers:
        chosen = choice["chosen"]
        name = f"{chosen['kind']} {chosen['version']} ({chosen['cc']})" if chosen else "none"
        print(f"  CUDA {choice['cuda']}: {name}: {choice['why']}", file=out)
    print(f"system features: {' '.join(report.system_features) or 'none (no GPU: builds requiring cuda are skipped)'}", file=out)
    if report.dask_worker_resources:
        print(f"as a Dask build worker: dask worker tcp://SCHEDULER:8786 --resources \"{report.dask_worker_resources}\" "
              "(one worker per GPU, each with CUDA_VISIBLE_DEVICES=<index>)", file=out)
    store = report.store
    held = f"{store.get('paths', 0)} paths, {format_size(store.get('narSize', 0))} as NARs" if store.get("exists") else "not created yet"
    print(f"store: {store['dir']} ({held})", file=out)
    for cache in report.caches:
        print(f"cache {cache['cache']}: {cache['dir']} ({cache['entries']} entries, {format_size(cache['size'])})", file=out)
    dirs = "; ".join(f"{d['kind']} {d['path']} ({d['files']} files)" for d in report.manifests["directories"])
    print(f"manifests: {dirs}", file=out)
    if report.hosts is None:
        print("hosts: not probed (--offline or $CUDAPKGS_PROBE_HOSTS=0)", file=out)
    else:
        print("hosts (one HEAD each, 4 s deadline):", file=out)
        for h in report.hosts:
            print(f"  {h['what']}: {h['url']} {'answers' if h['answers'] else 'does not answer: ' + str(h['reason'])}", file=out)
    for note in report.notes:
        print(f"\nnote: {note.what}\n  {note.suggestion}", file=out)
    if report.problems:
        print(f"\n{len(report.problems)} problem(s):", file=out)
        for problem in report.problems:
            print(f"- {problem.what}\n  fix: {problem.fix}", file=out)
        return 1
    if not report.gpus and not report.driver:
        # "no problems found" alone read as if CUDA programs would run here
        print("\nno problems found for building; no GPU or NVIDIA driver here, so CUDA programs built here "
              "load but cannot run (they need a machine with a GPU and its driver)", file=out)
    else:
        print("\nno problems found", file=out)
    return 0
