"""`cudapkgs shell`: a shell (or a command) in the development environment of packages, built first.

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .build import _max_cache_size, realise_and_link, substituters_from_args
from .eval import CONFIG_HELP, add_eval_options, pkgs_from_args
from .installables import Installable, _jobs, _project_items, add_project_options, evaluate, without_fetchers
from .. import programs


def register(subparsers: Any) -> None:
    """Add `shell` to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "shell",
        help="a shell (or command) with packages' bin, include and lib directories, CUDAToolkit_ROOT, …",
        description="Build the packages (as `build` does, without links), then start $SHELL, or the "
        "--command, with the environment a build of something depending on them would see: "
        "PATH, CPATH, LIBRARY_PATH and PKG_CONFIG_PATH from their outputs and what they propagate, "
        "CUDAToolkit_ROOT for CMake, CUDA_HOME and CUDACXX when nvcc is among them. Programs find their "
        "libraries through RUNPATH: LD_LIBRARY_PATH is left alone. `cudapkgs plan --shell` with the same "
        "packages says what the shell will download or build first.\n\n" + CONFIG_HELP,
        epilog="examples:\n"
        "  cudapkgs shell --set allowUnfree=true cudaPackages_13_0.cuda_nvcc cudaPackages_13_0.cuda_cudart\n"
        "  cudapkgs shell --set allowUnfree=true cudaPackages_13_0.cuda_nvcc cudaPackages_13_0.cuda_cudart \\\n"
        "      --command nvcc -arch=sm_90 saxpy.cu -o saxpy\n"
        "  eval \"$(cudapkgs shell --print-env cudaPackages_13_0.cuda_cudart --set allowUnfree=true)\"",
        formatter_class=fmt,
    )
    p.add_argument("attrpaths", nargs="*", metavar="ATTRPATH",
                   help="packages (attribute paths or store paths); none: the project's (cudapkgs.toml, "
                   "checked against cudapkgs.lock)")
    add_project_options(p, "enter the project's shell")
    p.add_argument("-c", "--command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="run COMMAND (with its arguments: everything after --command, one word per argument; "
                   "for a line of shell, bash -c 'a; b') instead of $SHELL")
    p.add_argument("--print-env", action="store_true", help="print `export` lines instead of starting a shell")
    p.add_argument("--profile", metavar="LINK",
                   help="make LINK a GC root of the shell (a link to a store path referring to all its packages): "
                   "`cudapkgs gc` keeps what the shell and what was built in it need while LINK exists "
                   "(as `nix develop --profile`)")
    p.add_argument("--venv", metavar="DIR",
                   help="with python3 or Python packages: the shell's own virtual environment, where `pip install` goes "
                   "(default: one per interpreter and packages, under $XDG_DATA_HOME/cudapkgs/shell-venvs)")
    p.add_argument("--no-venv", action="store_true",
                   help="no virtual environment: the store's Python packages on PYTHONPATH only (pip then is the host's)")
    p.add_argument("--no-substitute", action="store_true",
                   help="do not ask the configured substituters; build everything that is missing")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="up to N builds at once, and up to N sources of waiting builds unpacked ahead ('auto': CPUs)")
    add_eval_options(p, json_flag=False)
    p.set_defaults(func=run_shell)


def run_shell(args: argparse.Namespace) -> int:
    """Build the packages, then run a shell (or a command) in their development environment."""
    import os
    import subprocess

    from ..shell import export_lines, prepare, shell_environment

    from ..realise.generic import dependency_paths

    store_dir, items = evaluate(args) if args.attrpaths else _project_items(args)

    def expand(items: list[Installable]) -> tuple[list[Installable], Any, list[Any]]:
        return shell_items(args, items)

    items, cc, develop = expand(items)
    reevaluate = None
    if args.attrpaths:  # a fetcher whose host does not answer: evaluated again without it (build.realise_and_link)
        again = without_fetchers(args)

        def reevaluate(skipped: Any) -> Any:
            nonlocal cc, develop
            found = again(skipped)
            if found is None:
                return None
            expanded, cc, develop = expand(found)
            return expanded

    substituters = None if args.no_substitute else substituters_from_args(args)
    realise_and_link(store_dir, items, out_link=None, jobs=args.jobs, quiet=True,
                     max_cache_size=_max_cache_size(args), substituters=substituters, reevaluate=reevaluate)
    paths = list(dict.fromkeys(p for item in items for p in item.outputs.values()))
    for d in develop:
        native, host = dependency_paths(d)
        paths += [p for p in [*native, *host] if p not in paths]
    if cc is not None:  # the wrapper first on PATH
        paths = [*cc.outputs.values(), *(p for p in paths if p not in cc.outputs.values())]
    driver = getattr(items[0].drv, "attrs", {}).get("driverLibDir") if items and items[0].drv is not None else None
    from ..store.store import Store

    with Store.open(store_dir) as store:  # the joined toolkit root, the stand-ins for host CUDA tools
        extras = prepare(store, paths)
        if args.profile:
            from ..shell import shell_root

            root = store.add_indirect_root(_profile_link(args.profile), shell_root(store, paths, extras))
            print(f"cudapkgs: {root} keeps this shell's packages from `cudapkgs gc` (remove it to let them go)",
                  file=sys.stderr)
        elif getattr(args, "project_env", None) is not None and not args.attrpaths:
            _project_root(store, args.project_env.project.root, paths, extras)
    cuda_set, mixed = _cuda_set(args, items)
    if mixed:
        print(f"cudapkgs: warning: {mixed}", file=sys.stderr)
    env = shell_environment(paths, store_dir=store_dir, driver_dir=driver, extras=extras, cuda_set=cuda_set,
                            build_tree=os.getcwd())
    if not args.no_venv:
        env = _with_venv(args, env, store_dir)
    if extras.hidden:
        where = ", ".join(dict.fromkeys(os.path.dirname(p) for p in extras.hidden.values()))
        print(f"cudapkgs: note: the host's {', '.join(sorted(extras.hidden))} ({where}) are hidden in this shell: "
              "its packages do not provide them", file=sys.stderr)
    if args.print_env:
        sys.stdout.write(export_lines(env))
        return 0
    command = args.command or [os.environ.get("SHELL") or "/bin/sh"]
    try:
        return subprocess.call(command, env=env)
    except FileNotFoundError:
        from ..errors import UsageError

        raise UsageError(f"cannot run {command[0]!r}: no such program") from None


def shell_items(args: argparse.Namespace, items: list[Installable]) -> tuple[list[Installable], Any, list[Any]]:
    """What a shell of `items` (the evaluated installables) realises: `items`, stdenv.cc (the
    compiler wrapper first on the shell's PATH; `_shell_cc`) and the inputs of every package built by
    the generic builder (as `nix develop` brings them). Returns (items, cc derivation or None,
    those packages' derivations). Evaluates only; builds nothing."""
    cc = _shell_cc(args, items)
    if cc is not None:
        items = [*items, Installable("stdenv.cc", drv=cc)]
    # A package built from source also brings its build inputs (`nix develop`): cmake, nvcc, cuBLAS, …
    develop = [i.drv for i in items if i.drv is not None and i.drv.builder == "mkDerivation" and i.drv is not cc]
    items += [Installable(f"input of {d.name}", drv=dep) for d in develop for dep in d.deps]
    return items, cc, develop


def _shell_cc(args: argparse.Namespace, items: list[Installable]) -> Any:
    """stdenv.cc's derivation for a shell: the compiler a requested nvcc was set up with, else the default."""
    from ..stdenv.cc_wrapper import cc_wrapper_for

    pkgs = pkgs_from_args(args)
    recorded = next(
        (i.drv.attrs["hostCompiler"] for i in items if i.drv is not None and "hostCompiler" in i.drv.attrs), None
    )
    cc = cc_wrapper_for(pkgs.config, pkgs.system, recorded)
    if cc is None:
        return None
    drv = cc.derivation
    stores = {i.drv.store_dir for i in items if i.drv is not None}
    return drv if not stores or stores == {drv.store_dir} else None  # a project's own store: no wrapper there


def _cuda_set(args: argparse.Namespace, items: list[Installable]) -> tuple[Any, str | None]:
    """The CUDA set whose capabilities the shell exports (`shell.CudaSet`, None without one) and the
    warning for packages of several sets (`shell.mixed_sets_message`).

    The sets are read from the derivations (`shell.cuda_sets_in`); the set's flags from the packages
    as they were evaluated (torch's ``passthru.cudaPackages``, or the set an attribute path names,
    so ``pkgsForCudaArch.sm_90`` keeps its capabilities), else from the top level's set of that name.
    """
    from ..errors import CudapkgsError
    from ..shell import CudaSet, cuda_sets_in, mixed_sets_message

    closures = {i.label: [d.name for d in i.drv.closure()] for i in items
                if i.drv is not None and not i.label.startswith("input of ") and i.label != "stdenv.cc"}
    found = cuda_sets_in(closures)
    if not found:
        return None, None
    scopes = [s for s in _named_scopes(args) if f"cudaPackages_{str(s.cudaMajorMinorVersion).replace('.', '_')}" in found]
    scope = scopes[0] if scopes else None
    if scope is None:
        try:
            scope = pkgs_from_args(args)[next(iter(found))]
        except (CudapkgsError, KeyError, AttributeError):  # a set this cudapkgs lacks (a derivation from elsewhere)
            return None, mixed_sets_message(found)
    flags = scope.flags
    name = f"cudaPackages_{str(scope.cudaMajorMinorVersion).replace('.', '_')}"
    return (CudaSet(name, str(scope.cudaMajorMinorVersion), tuple(str(c) for c in flags.cudaCapabilities),
                    str(flags.cmakeCudaArchitecturesString)), mixed_sets_message(found))


def _named_scopes(args: argparse.Namespace) -> list[Any]:
    """The CUDA sets the attribute paths name: a package's own ``cudaPackages`` (torch's passthru), or
    the set an attribute is a member of; in argument order."""
    from ..errors import CudapkgsError
    from ..lib.attrpath import parse_attrpath, resolve

    if not args.attrpaths:
        return []
    pkgs = pkgs_from_args(args)
    found = []
    for text in args.attrpaths:
        if text.endswith(".json") or "/" in text:
            continue
        try:
            path = parse_attrpath(text)
            package = resolve(pkgs, path)
            owner = package["cudaPackages"] if hasattr(package, "__contains__") and "cudaPackages" in package else None
            if owner is None and len(path) > 1:
                owner = resolve(pkgs, path[:-1])
        except (CudapkgsError, KeyError, AttributeError):  # no set to read here
            continue
        if owner is not None and hasattr(owner, "__contains__") and "flags" in owner and "cudaMajorMinorVersion" in owner:
            found.append(owner)
    return found


def _with_venv(args: argparse.Namespace, env: dict[str, str], store_dir: str) -> dict[str, str]:
    """`env` with the shell's own virtual environment (`cudapkgs.shell_venv`) when the shell's
    ``python3`` is the store's (an interpreter listed alone, or one Python packages brought); unchanged
    otherwise.  An interpreter alone gets one too: without it ``pip`` was the host's, installing into the
    host's Python (a new user's first ``pip install`` in ``cudapkgs shell python3 cmake``).  Raises
    `UsageError` for ``--venv DIR`` in a shell without the store's ``python3``, which was ignored."""
    import os

    from ..errors import UsageError
    from ..shell_venv import default_venv_dir, ensure_venv, venv_environment

    inside = store_dir.rstrip("/") + "/"
    site_dirs = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e.startswith(inside)]
    python = programs.which("python3", path=env.get("PATH", ""))
    if python is None or not python.startswith(inside):
        if args.venv:
            raise UsageError(f"--venv {args.venv}: this shell has no python3 from the store for a virtual "
                             "environment; list python3 (or a Python package) among its packages")
        return env
    where = args.venv or default_venv_dir(python, site_dirs)
    venv = ensure_venv(where, python, site_dirs, store_dir)
    return venv_environment(env, venv, site_dirs)


def _profile_link(text: str) -> str:
    """--profile's link, its directory made when missing (one level: a project's ``.cudapkgs``); a
    directory that is a symbolic link (planted in a cloned repository) is refused, not written through."""
    import os

    from ..errors import UsageError

    link = os.path.abspath(text)
    parent = os.path.dirname(link)
    if os.path.islink(parent):
        raise UsageError(f"--profile {text}: {parent} is a symbolic link; give a link in a real directory")
    if not os.path.isdir(parent):
        try:
            os.mkdir(parent, 0o755)
        except OSError as error:
            raise UsageError(f"--profile {text}: cannot make {parent} ({error.strerror}); make it first") from None
    return link


def _project_root(store: Any, project_dir: Any, paths: list[str], extras: Any) -> None:
    """A project's shell is kept alive by ``<project>/.cudapkgs/shell``, a GC root as nix-direnv keeps its
    roots in ``.direnv``; one that cannot be made (a ``.cudapkgs`` that is a link, a file planted at
    ``shell``) is skipped with a warning, the shell still entered."""
    import os

    from ..errors import CudapkgsError
    from ..shell import shell_root

    link = os.path.join(os.fspath(project_dir), ".cudapkgs", "shell")
    try:
        store.add_indirect_root(_profile_link(link), shell_root(store, paths, extras))
    except CudapkgsError as error:
        print(f"cudapkgs: warning: the project's shell is not kept from `cudapkgs gc`: {error}", file=sys.stderr)
