"""`cudapkgs lock`: pin a project's environment (cudapkgs.toml -> cudapkgs.lock); see `project`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EPILOG = """\
a project file (cudapkgs.toml, in this directory or a parent):
  set = "cudaPackages_12_8"
  capabilities = ["9.0"]
  packages = ["cuda_nvcc", "cuda_cudart", "libcublas", "myapp"]
  files = ["packages.py"]          # the project's own package functions
  [config]
  allowUnfreePredicate = "cuda"

examples:
  cudapkgs lock                    # write cudapkgs.lock beside cudapkgs.toml
  cudapkgs lock --check            # exit 1 and list what differs from the lock here
  cudapkgs shell                   # the project's environment (checked against the lock)
"""


def register(subparsers: Any) -> None:
    """Add `lock` to the `cudapkgs` parser."""
    from .eval import CONFIG_HELP

    p = subparsers.add_parser(
        "lock",
        help="pin a project's environment: cudapkgs.toml -> cudapkgs.lock",
        description="Evaluate the project's packages (cudapkgs.toml in this directory or the nearest parent) "
        "and write cudapkgs.lock beside it: the configuration, the digests of NVIDIA's manifests and of the "
        "project's package files, and every derivation path. `cudapkgs shell` with no packages then gives "
        "the same environment on any machine, or says exactly what differs. Nothing is built.\n\n" + CONFIG_HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_project_option(p)
    p.add_argument("--check", action="store_true", help="do not write: compare with the existing lock (exit 1 if it differs)")
    group = p.add_argument_group("evaluation options")
    group.add_argument("--config", metavar="FILE", help="read configuration from a TOML file (under the project's [config])")
    group.add_argument("--set", dest="sets", metavar="KEY=VALUE", action="append", default=[],
                       help="set a configuration key (over the project's [config])")
    group.add_argument("--system", metavar="SYSTEM", help="host platform (default: this machine)")
    p.add_argument("--json", action="store_true", help="print the lock (or the differences) as JSON")
    p.set_defaults(func=run_lock)


def add_project_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", metavar="PATH",
                   help="the project file or its directory (default: cudapkgs.toml here or in a parent)")


def project_environment(args: argparse.Namespace) -> Any:
    """The project the arguments name, evaluated."""
    from ..errors import UsageError
    from ..project import PROJECT_FILE, evaluate_project, find_project, load_project

    found = find_project(getattr(args, "project", None))
    if found is None:
        raise UsageError(f"no {PROJECT_FILE} here or in a parent directory: name packages, or write one "
                         f"(see `cudapkgs lock --help`)")
    project = load_project(found)
    return evaluate_project(project, config_file=args.config, sets=args.sets, system=args.system)


def check_against_lock(env: Any) -> list[str]:
    """The differences between the project's lock and this machine ([] also when there is no lock)."""
    from ..project import check_lock, lock_data, read_lock

    if not env.project.lock_file.exists():
        return []
    return check_lock(read_lock(env.project.lock_file), lock_data(env))


def run_lock(args: argparse.Namespace) -> int:
    import json

    from ..project import check_lock, lock_data, read_lock, write_lock

    env = project_environment(args)
    data = lock_data(env)
    lock = env.project.lock_file
    if args.check:
        if not lock.exists():
            print(f"cudapkgs: error: {lock} does not exist; run `cudapkgs lock`", file=sys.stderr)
            return 1
        differences = check_lock(read_lock(lock), data)
        if args.json:
            print(json.dumps({"lock": str(lock), "differences": differences}))
        elif differences:
            print(f"{lock} differs from this machine:", file=sys.stderr)
            for line in differences:
                print(f"  {line}", file=sys.stderr)
        else:
            print(f"{lock}: up to date ({len(data['packages'])} packages)")
        return 1 if differences else 0
    write_lock(lock, data)
    if args.json:
        print(json.dumps(data))
    else:
        print(f"wrote {lock}: {len(data['packages'])} packages, {len(data['derivations'])} derivations, "
              f"CUDA {data['cudaVersion']} ({data['set']})")
    return 0
