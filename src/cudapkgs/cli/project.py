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

    p = subparsers.add_parser(
        "allow",
        help="allow a project file (cudapkgs.toml) with its present contents",
        description="A project file can run code (its Python files and overlays) and choose the store, the "
        "fetchers, the substituters and their keys, so cudapkgs uses one only once you allow its exact "
        "contents, as direnv's `allow`: the sha256 of cudapkgs.toml and of every Python file it names, "
        "recorded for its path outside the project ($XDG_DATA_HOME/cudapkgs/allowed). Any change to them "
        "needs a new `cudapkgs allow`. A project file owned by someone else (or in a directory anyone may "
        "write) is refused unless your configuration's safeDirectories lists its directory.",
        epilog="examples:\n  cudapkgs allow                 # cudapkgs.toml here or in a parent\n"
        "  cudapkgs allow ~/src/myproj    # its cudapkgs.toml\n  cudapkgs deny",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", nargs="?", metavar="PATH", help="the project file or its directory (default: cudapkgs.toml here or in a parent)")
    p.add_argument("--config", metavar="FILE", help="read configuration (safeDirectories) from a TOML file")
    p.set_defaults(func=run_allow)

    p = subparsers.add_parser(
        "deny",
        help="forget that a project file was allowed",
        description="Forget that the project file (cudapkgs.toml here or in a parent, or PATH) was allowed: "
        "cudapkgs refuses it again until `cudapkgs allow`.",
    )
    p.add_argument("path", nargs="?", metavar="PATH", help="the project file or its directory (default: cudapkgs.toml here or in a parent)")
    p.set_defaults(func=run_deny)


def add_project_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--project", metavar="PATH",
                   help="the project file or its directory (default: cudapkgs.toml here or in a parent)")


def _found(where: str | None) -> Any:
    """The project file `where` names (a file or its directory; None: here or in a parent)."""
    from ..errors import UsageError
    from ..project import PROJECT_FILE, find_project

    found = find_project(where, parents=where is None)  # a named directory: its own file only
    if found is None:
        raise UsageError(f"no {PROJECT_FILE} {'in ' + where if where else 'here or in a parent directory'}: "
                         "name packages, or write one (see `cudapkgs lock --help`)")
    return found


def project_environment(args: argparse.Namespace) -> Any:
    """The project the arguments name, evaluated (once it is allowed: `UntrustedProjectError` otherwise)."""
    from ..project import evaluate_project, load_project

    project = load_project(_found(getattr(args, "project", None)))
    return evaluate_project(project, config_file=args.config, sets=args.sets, system=args.system)


def run_allow(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..errors import shown
    from ..project import allow_project, describe_project, load_project

    project = load_project(_found(args.path))
    allow_project(project, safe_directories=load_config(file=args.config).safeDirectories)
    print(shown(f"allowed {project.file}; with these contents it will:"))
    for line in describe_project(project):
        print(f"  {shown(line)}")
    return 0


def run_deny(args: argparse.Namespace) -> int:
    from ..project import PROJECT_FILE, deny_project, find_project

    found = find_project(args.path, parents=args.path is None)
    if found is None:
        from ..errors import UsageError

        raise UsageError(f"no {PROJECT_FILE} {'in ' + args.path if args.path else 'here or in a parent directory'}")
    from ..errors import shown

    if deny_project(found):
        print(shown(f"denied {found}: cudapkgs refuses it until `cudapkgs allow`"))
    else:
        print(shown(f"{found} was not allowed"))
    return 0


def check_against_lock(env: Any) -> list[str]:
    """The differences between the project's lock and this machine ([] also when there is no lock)."""
    from ..project_lock import check_lock, lock_data, read_lock

    if not env.project.lock_file.exists():
        return []
    return check_lock(read_lock(env.project.lock_file), lock_data(env))


def run_lock(args: argparse.Namespace) -> int:
    import json

    from ..project_lock import check_lock, lock_data, read_lock, write_lock

    env = project_environment(args)
    data = lock_data(env)
    lock = env.project.lock_file
    if args.check:
        from ..errors import shown

        if not lock.exists():
            print(shown(f"cudapkgs: error: {lock} does not exist; run `cudapkgs lock`"), file=sys.stderr)
            return 1
        differences = check_lock(read_lock(lock), data)
        if args.json:
            print(json.dumps({"lock": str(lock), "differences": differences}))
        elif differences:
            # A lock is not covered by `cudapkgs allow`: its keys and values are shown escaped (issue 30, item 7).
            print(shown(f"{lock} differs from this machine:"), file=sys.stderr)
            for line in differences:
                print(f"  {shown(line)}", file=sys.stderr)
        else:
            print(shown(f"{lock}: up to date ({len(data['packages'])} packages)"))
        return 1 if differences else 0
    write_lock(lock, data)
    if args.json:
        print(json.dumps(data))
    else:
        print(f"wrote {lock}: {len(data['packages'])} packages, {len(data['derivations'])} derivations, "
              f"CUDA {data['cudaVersion']} ({data['set']})")
    return 0
