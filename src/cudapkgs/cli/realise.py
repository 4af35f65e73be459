"""`cudapkgs build` and `cudapkgs log`: realise packages into the store, read their build logs.

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any

from .eval import CONFIG_HELP, add_eval_options, pkgs_from_args
from ..derivation import derivation_of

EPILOG_BUILD = """\
examples:
  cudapkgs build --set allowUnfree=true cudaPackages_13_0.cuda_nvcc cudaPackages_13_0.cuda_cudart -o result
      links ./result (nvcc's out) and ./result-2 (cudart's out), with ./result-2-dev,
      ./result-2-lib, ... for cudart's other outputs; each link is a GC root
  cudapkgs build --dry-run --set allowUnfree=true cudaPackages_13_0.cudnn
      what would be fetched (with download sizes) and built; nothing is changed
  cudapkgs build -j 8 --keep-failed --set allowUnfree=true cudaPackages_13_0.libcublas
  cudapkgs build ./result      a store path: checked to be valid, then linked
  cudapkgs log ./result        the build log of what ./result points to

Output paths are printed one per line (--json: a list of {attrPath, drvPath,
outputs}). Progress goes to stderr: bars on a terminal, plain lines otherwise.
Each build writes its log to <store>/.logs/; a failure names it.
"""

EPILOG_LOG = """\
examples:
  cudapkgs log ./result
  cudapkgs log /path/to/store/<hash>-cuda13.0-cuda_nvcc-13.0.88
  cudapkgs log /path/to/store/<hash>-cuda13.0-cuda_nvcc-13.0.88.drv
  cudapkgs log --set allowUnfree=true cudaPackages_13_0.cuda_nvcc   (also after a failed build)
"""

STORE_HELP = "the store root (default: the one PATH lies in, else $CUDAPKGS_STORE, else $XDG_DATA_HOME/cudapkgs/store)"


def _jobs(text: str) -> int:
    if text == "auto":
        return os.cpu_count() or 1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of jobs or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("the number of jobs must be at least 1")
    return value


def register(subparsers: Any) -> None:
    """Add `build` and `log` to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "build",
        help="fetch and build packages into the store, linking ./result",
        description="Realise packages: evaluate every ATTRPATH first (an unfree, unsupported or broken "
        "package fails here, before any download, with the reason), then fetch and build whatever of "
        "their closures is not valid in the store yet, dependencies first and up to -j builds at once. "
        "After a failure no new build starts; running ones finish and every failure is reported.\n\n"
        + CONFIG_HELP,
        epilog=EPILOG_BUILD,
        formatter_class=fmt,
    )
    p.add_argument("attrpaths", nargs="*", metavar="ATTRPATH",
                   help="attribute path of a package (e.g. cudaPackages_13_0.cuda_nvcc), or a store path; "
                   "none: the project's packages (cudapkgs.toml, checked against cudapkgs.lock)")
    add_project_options(p, "build the project's packages")
    p.add_argument("-o", "--out-link", metavar="LINK", default="result",
                   help="name of the result links (default: result; result-2, ... for later packages, "
                   "result-dev, ... for outputs other than out)")
    p.add_argument("--no-link", action="store_true", help="make no result links (and so no GC roots)")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="run up to N builds at once; 'auto' (default) is the number of CPUs. While builds "
                   "wait for their inputs, up to N of their sources (already downloaded) are unpacked ahead")
    p.add_argument("--dry-run", action="store_true",
                   help="only print what would be fetched (with download sizes) and built")
    p.add_argument("--keep-failed", action="store_true", help="keep the build directory of a failed build (its path is printed)")
    p.add_argument("--push-to", metavar="URL",
                   help="after building, upload the closures of the results to this binary cache "
                   "(file:///dir, http(s)://…, s3://bucket?…); paths it has already are skipped")
    p.add_argument("--sign-key", metavar="FILE", help="with --push-to: sign the narinfos with this secret key")
    p.add_argument("--no-substitute", action="store_true",
                   help="do not ask the configured substituters; build everything that is missing")
    add_builders_option(p)
    add_eval_options(p)
    p.set_defaults(func=run_build)

    p = subparsers.add_parser(
        "shell",
        help="a shell (or command) with packages' bin, include and lib directories, CUDAToolkit_ROOT, …",
        description="Build the packages (as `build` does, without links), then start $SHELL, or the "
        "--command, with the environment a build of something depending on them would see: "
        "PATH, CPATH, LIBRARY_PATH and PKG_CONFIG_PATH from their outputs and what they propagate, "
        "CUDAToolkit_ROOT for CMake, CUDA_HOME and CUDACXX when nvcc is among them. Programs find their "
        "libraries through RUNPATH: LD_LIBRARY_PATH is left alone.\n\n" + CONFIG_HELP,
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
                   help="run COMMAND (with its arguments: everything after --command) instead of $SHELL")
    p.add_argument("--print-env", action="store_true", help="print `export` lines instead of starting a shell")
    p.add_argument("--no-substitute", action="store_true",
                   help="do not ask the configured substituters; build everything that is missing")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="up to N builds at once, and up to N sources of waiting builds unpacked ahead ('auto': CPUs)")
    add_eval_options(p, json_flag=False)
    p.set_defaults(func=run_shell)

    p = subparsers.add_parser(
        "test",
        help="run packages' tests (passthru.tests); GPU tests run only where a GPU is",
        description="Build every test of each package (its passthru.tests; a test is a package whose "
        "build runs the check). A test requiring system features this machine does not offer (\"cuda\", "
        "\"cuda-sm-90\", …, from its GPUs or $CUDAPKGS_SYSTEM_FEATURES) is skipped and says what it "
        "needs. Exit status 1 when a test failed.\n\n" + CONFIG_HELP,
        epilog="examples:\n  cudapkgs test saxpy\n"
        "  cudapkgs test --set cudaSupport=true --set allowUnfree=true saxpy   # tests.cuda.run: needs a GPU",
        formatter_class=fmt,
    )
    p.add_argument("attrpaths", nargs="+", metavar="ATTRPATH", help="packages whose tests to run")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="up to N builds at once, and up to N sources of waiting builds unpacked ahead ('auto': CPUs)")
    add_builders_option(p)
    p.add_argument("--push-to", metavar="URL", help="with --builders: the binary cache the workers push to and this machine substitutes from")
    p.add_argument("--sign-key", metavar="FILE", help="with --builders: the secret key that signs what is pushed")
    add_eval_options(p)
    p.set_defaults(func=run_test)

    p = subparsers.add_parser(
        "log",
        help="print the build log of a store path, derivation or package",
        description="Print the log written when a store path was built. PATH may be an output path, "
        "a symlink to one such as ./result, a .drv path, or an attribute path (which also finds the "
        "log of a build that failed).\n\n" + CONFIG_HELP,
        epilog=EPILOG_LOG,
        formatter_class=fmt,
    )
    p.add_argument("path", metavar="PATH", help="store path, ./result link, .drv path or attribute path")
    p.add_argument("--store", metavar="DIR", help=STORE_HELP)
    add_eval_options(p, json_flag=False)
    p.set_defaults(func=run_log)


# -- build ----------------------------------------------------------------------


@dataclass(frozen=True)
class Installable:
    """One command-line argument, evaluated: a derivation, or a store path given by hand."""

    label: str
    drv: Any = None  # cudapkgs.derivation.Derivation
    path: str | None = None

    @property
    def outputs(self) -> dict[str, str]:
        return dict(self.drv.outputs) if self.drv is not None else {"out": self.path or ""}


def _is_path(text: str) -> bool:
    return "/" in text and not text.startswith(('"', "'"))


def _get(value: Any, name: str) -> Any:
    try:
        return value[name] if name in value else None
    except TypeError:
        return getattr(value, name, None)


def evaluate(args: argparse.Namespace) -> tuple[str, list[Installable]]:
    """The store directory and every argument's derivation; any evaluation error is raised here, before building."""
    from ..lib.attrpath import parse_attrpath, resolve
    from ..store.location import default_store_dir

    pkgs = pkgs_from_args(args)
    store_dir = default_store_dir(pkgs.config)
    items = []
    for text in args.attrpaths:
        if text.endswith(".json") and os.path.exists(text):
            # Hostile input: checked field by field, and only for the configured store.
            items.append(Installable(text, drv=_derivation_from_file(text, store_dir)))
        elif _is_path(text):
            items.append(Installable(text, path=text))
        else:
            items.append(Installable(text, drv=derivation_of(resolve(pkgs, parse_attrpath(text)), text)))
    return store_dir, items


def _derivation_from_file(path: str, store_dir: str) -> Any:
    """A derivation saved with `cudapkgs show-derivation ATTR > FILE.json` (e.g. on another machine).

    Only a regular file is read (a FIFO or device would hang or never end); the
    derivation must be for `store_dir`, the configured store.
    """
    import json

    from ..derivation import Derivation
    from ..errors import EvalError
    from ..inputs import read_input_file

    try:
        data = json.loads(read_input_file(path, what="derivation file"))
    except (ValueError, UnicodeDecodeError) as error:
        raise EvalError(f"{path}: cannot read a derivation ({error})") from None
    except RecursionError:
        raise EvalError(f"{path}: cannot read a derivation (nested too deeply)") from None
    return Derivation.from_json(data, source=path, store_dir=store_dir)


def _project_items(args: argparse.Namespace) -> tuple[str, list[Installable]]:
    """The project's packages (cudapkgs.toml), after checking them against its cudapkgs.lock."""
    from ..store.location import default_store_dir
    from ..errors import EvalError, UsageError
    from .project import check_against_lock, project_environment

    if getattr(args, "files", None) or getattr(args, "args", None):
        raise UsageError("-f/--arg need packages to name; a project lists its files in cudapkgs.toml (files = [...])")
    env = project_environment(args)
    args.project_env = env  # its substituters and keys (substituters_from_args)
    if not env.project.lock_file.exists():
        print(f"cudapkgs: note: {env.project.file} has no lock beside it; `cudapkgs lock` pins this environment",
              file=sys.stderr)
    differences = check_against_lock(env)
    if differences and not args.ignore_lock:
        lines = "\n".join(f"  {line}" for line in differences)
        raise EvalError(
            f"this machine does not reproduce {env.project.lock_file}:\n{lines}\n"
            "(`cudapkgs lock` to accept this machine's environment, --ignore-lock to enter it anyway)"
        )
    if differences:
        print(f"cudapkgs: warning: the environment differs from {env.project.lock_file} ({len(differences)} differences)",
              file=sys.stderr)
    items = [Installable(label, drv=derivation_of(pkg, label)) for label, pkg in env.packages.items()]
    return default_store_dir(env.config), items


def run_shell(args: argparse.Namespace) -> int:
    """Build the packages, then run a shell (or a command) in their development environment."""
    import os
    import subprocess

    from ..shell import export_lines, host_cuda_dirs, propagated_closure, shell_environment

    from ..realise.generic import dependency_paths

    store_dir, items = evaluate(args) if args.attrpaths else _project_items(args)
    cc = _shell_cc(args, items)
    if cc is not None:
        items = [*items, Installable("stdenv.cc", drv=cc)]
    # A package built from source also brings its build inputs (`nix develop`): cmake, nvcc, cuBLAS, …
    develop = [i.drv for i in items if i.drv is not None and i.drv.builder == "mkDerivation" and i.drv is not cc]
    items += [Installable(f"input of {d.name}", drv=dep) for d in develop for dep in d.deps]
    substituters = None if args.no_substitute else substituters_from_args(args)
    realise_and_link(store_dir, items, out_link=None, jobs=args.jobs, quiet=True,
                     max_cache_size=_max_cache_size(args), substituters=substituters)
    paths = list(dict.fromkeys(p for item in items for p in item.outputs.values()))
    for d in develop:
        native, host = dependency_paths(d)
        paths += [p for p in [*native, *host] if p not in paths]
    if cc is not None:  # the wrapper first on PATH
        paths = [*cc.outputs.values(), *(p for p in paths if p not in cc.outputs.values())]
    driver = getattr(items[0].drv, "attrs", {}).get("driverLibDir") if items and items[0].drv is not None else None
    env = shell_environment(paths, store_dir=store_dir, driver_dir=driver)
    hidden = host_cuda_dirs(os.environ.get("PATH", ""), propagated_closure(paths))
    if hidden:
        has_nvcc = "CUDACXX" in env
        what = "" if has_nvcc else "; this shell has no nvcc (add a set's cuda_nvcc to the packages)"
        print(f"cudapkgs: note: the host's CUDA tools are left out of PATH ({', '.join(hidden)}){what}", file=sys.stderr)
    if args.print_env:
        sys.stdout.write(export_lines(env))
        return 0
    command = args.command or [os.environ.get("SHELL") or "/bin/sh"]
    try:
        return subprocess.call(command, env=env)
    except FileNotFoundError:
        from ..errors import UsageError

        raise UsageError(f"cannot run {command[0]!r}: no such program") from None


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


def add_project_options(p: argparse.ArgumentParser, what: str) -> None:
    """--project and --ignore-lock, for a command that uses the project (cudapkgs.toml) when given no ATTRPATH."""
    p.add_argument("--project", metavar="PATH",
                   help="with no ATTRPATH: the project file or its directory (default: cudapkgs.toml here or in a parent)")
    p.add_argument("--ignore-lock", action="store_true",
                   help=f"with no ATTRPATH: {what} even when the project differs from cudapkgs.lock")


def add_builders_option(p: argparse.ArgumentParser) -> None:
    """--builders: build on a Dask cluster (with --push-to as the cache between it and this machine)."""
    p.add_argument("--builders", metavar="URL",
                   help="build on the Dask cluster whose scheduler is at dask://HOST:PORT instead of here; "
                   "workers push their outputs to the --push-to cache (signed with --sign-key) and this "
                   "machine substitutes them from it; a build needing system features (cuda, cuda-sm-90) "
                   "runs only on a worker started with those resources")


def builders_from_args(args: argparse.Namespace) -> Any:
    """The `DaskBuilders` that --builders/--push-to/--sign-key and the configuration describe, or None."""
    if not getattr(args, "builders", None):
        return None
    from ..config import load_config
    from ..errors import UsageError
    from ..realise.dask_executor import DaskBuilders, parse_builders_url

    if not args.push_to:
        raise UsageError("--builders needs --push-to URL: the binary cache that carries inputs and outputs "
                         "between this machine and the workers")
    config = load_config(file=args.config, sets=args.sets)
    keys = list(config["trustedPublicKeys"])
    if args.sign_key:
        from ..store.caches.signing import SecretKey

        keys.append(str(SecretKey.load(args.sign_key).public))  # what we and the workers sign is trusted here
    return DaskBuilders(
        address=parse_builders_url(args.builders), cache=args.push_to,
        sign_key_file=os.path.abspath(args.sign_key) if args.sign_key else None,
        trusted_keys=keys, require_sigs=bool(config["requireSigs"]), fetchers=tuple(config["fetchers"]),
    )


def run_test(args: argparse.Namespace) -> int:
    """Build every test of the packages; a test needing features this machine lacks is skipped."""
    import json

    from ..host.features import host_system_features
    from ..testers import run_tests

    builders = builders_from_args(args)
    offered = None if builders is not None else host_system_features()
    results = run_tests(pkgs_from_args(args), args.attrpaths, offered=offered, jobs=args.jobs, builders=builders)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        from ..table import print_table

        print_table(["test", "result", "detail"], [[r.test, r.result, r.detail] for r in results])
        counts = {k: sum(r.result == k for r in results) for k in ("passed", "failed", "skipped")}
        where = (f"on the Dask cluster at {builders.address}" if builders is not None
                 else f"this machine offers: {' '.join(sorted(offered)) or 'no system features'}")
        print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped ({where})")
    return 1 if any(r.result == "failed" for r in results) else 0


def run_build(args: argparse.Namespace) -> int:
    store_dir, items = evaluate(args) if args.attrpaths else _project_items(args)
    max_cache_size = _max_cache_size(args)
    substituters = None if args.no_substitute else substituters_from_args(args)
    push = None
    if args.push_to:
        from ..store.caches import open_cache
        from ..store.caches.signing import SecretKey

        push = (open_cache(args.push_to), SecretKey.load(args.sign_key) if args.sign_key else None)
    elif args.sign_key:
        from ..errors import UsageError

        raise UsageError("--sign-key needs --push-to URL")
    return realise_and_link(
        store_dir, items, out_link=None if args.no_link else args.out_link, jobs=args.jobs,
        keep_failed=args.keep_failed, dry_run=args.dry_run, as_json=args.json, substituters=substituters, push=push,
        builders=builders_from_args(args), max_cache_size=max_cache_size,
    )


def substituters_from_args(args: argparse.Namespace) -> Any:
    """The `Substituters` the configuration names (None when it names none), or the project's
    environment's (`ProjectEnvironment.substituters_of`); warnings go to stderr."""
    from ..config import load_config

    def warn(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    env = getattr(args, "project_env", None)
    if env is not None:  # an allowed project: the user's caches, then its own (its keys for those only)
        return env.substituters_of(warn=warn)
    config = load_config(file=args.config, sets=args.sets)
    if not config["substituters"]:
        return None
    from ..store.caches.substitution import Substituters

    return Substituters.from_config(config, warn=warn)


def realise_and_link(
    store_dir: str,
    items: list[Installable],
    *,
    out_link: str | None = "result",
    jobs: int = 1,
    keep_failed: bool = False,
    dry_run: bool = False,
    as_json: bool = False,
    quiet: bool = False,
    substituters: Any = None,
    push: Any = None,
    builders: Any = None,
    max_cache_size: str | None = None,
) -> int:
    """What `cudapkgs build` does after evaluation: check, plan, build what is missing, link, print.

    ``max_cache_size`` (the ``maxCacheSize`` config key, e.g. "5GiB"): after building, the
    download caches are trimmed to it, least recently used entries first.
    """
    from ..realise.scheduler import plan, run
    from .progress import make_progress

    store = _open_store(store_dir, create=not dry_run)
    try:
        resolved = []
        for item in items:  # a store path given by hand must already be valid
            resolved.append(item if item.drv is not None else Installable(item.label, path=store.query(item.path).path))
        wheel_sizes = None
        if dry_run:
            from ..fetch.planning import lookup_wheel_sizes

            def wheel_sizes(wanted: list[tuple[str, str, str]]) -> dict[str, int]:
                sizes, problems = lookup_wheel_sizes(wanted)
                for problem in problems:
                    print(f"cudapkgs: note: wheel size unknown: {problem}", file=sys.stderr)
                return sizes

        the_plan = plan(store, [i.drv for i in resolved if i.drv is not None], substituters, wheel_sizes=wheel_sizes)
        if dry_run:
            _print_plan(the_plan, as_json)
            return 0
        if not the_plan.nothing_to_do:
            try:
                run(store, the_plan, jobs=jobs, keep_failed=keep_failed, progress=make_progress(sys.stderr),
                    substituters=substituters, builders=builders)
            finally:
                if max_cache_size is not None:
                    _trim_caches(store_dir, max_cache_size)
        if push is not None:
            _push(store, push, [p for i in resolved for p in i.outputs.values()])
        if out_link is not None:
            for index, item in enumerate(resolved):
                base = out_link if index == 0 else f"{out_link}-{index + 1}"
                for output, path in item.outputs.items():
                    _link(store, base if output == "out" else f"{base}-{output}", path)
    finally:
        store.close()
    if quiet:
        return 0
    if as_json:
        import json

        print(json.dumps([
            {"attrPath": i.label, "drvPath": i.drv.drv_path if i.drv is not None else None, "outputs": i.outputs}
            for i in resolved
        ], indent=2))
    else:
        sys.stdout.write("".join(p + "\n" for i in resolved for p in i.outputs.values()))
    return 0


def _push(store: Any, push: Any, paths: list[str]) -> None:
    """Upload the closures of `paths` to the --push-to cache, one line on stderr."""
    from ..table import format_size

    cache, key = push
    results = cache.upload_closure(store, paths, secret_key=key)
    sent = [info for _, info in results if info is not None]
    print(f"pushed {len(sent)} path(s) ({format_size(sum(i.file_size for i in sent))}) to {cache.url}"
          f"{f'; {len(results) - len(sent)} were there already' if len(sent) < len(results) else ''}",
          file=sys.stderr, flush=True)


def _max_cache_size(args: argparse.Namespace) -> str | None:
    from ..config import load_config

    return load_config(file=args.config, sets=args.sets)["maxCacheSize"]


def _trim_caches(store_dir: str, max_cache_size: str) -> None:
    """Apply the maxCacheSize budget; say on stderr what was evicted."""
    from ..fetch.cache import collect
    from ..config import parse_size
    from ..table import format_size

    result = collect(store_dir, max_size=parse_size(max_cache_size))
    if result.deleted:
        print(f"cudapkgs: maxCacheSize {max_cache_size}: evicted {len(result.deleted)} least recently used cache "
              f"entries ({format_size(result.freed)}); {format_size(result.kept)} kept", file=sys.stderr)


def _link(store: Any, link: str, path: str) -> None:
    """`store.add_indirect_root`, skipped when the link and its root entry are already right (no-op builds)."""
    import hashlib

    from ..store.paths import base32_encode, compress_hash

    full = os.path.abspath(link)
    # The entry name is Store.add_indirect_root's: base-32 of the compressed sha256 of the link's path.
    entry = os.path.join(store.gcroots_dir, "auto", base32_encode(compress_hash(hashlib.sha256(os.fsencode(full)).digest())))
    try:
        if os.readlink(full) == path and os.readlink(entry) == full:
            return
    except OSError:
        pass
    store.add_indirect_root(full, path)


class _NoStore:
    """Stands in for a store that does not exist yet (a dry run creates nothing): every path is invalid."""

    def __init__(self, store_dir: str) -> None:
        self.store_dir = store_dir
        self.db = self

    def invalid_paths(self, paths: Any) -> list[str]:
        return list(dict.fromkeys(paths))

    def is_valid(self, path: str) -> bool:
        return False

    def protect(self, paths: Any) -> list[str]:
        return []  # nothing is valid, so there is nothing a gc could take away

    def query(self, path: str) -> Any:
        from ..errors import StoreError

        raise StoreError(f"path '{os.path.abspath(path)}' is not in the store {self.store_dir} (there is no store there yet)")

    def close(self) -> None:
        pass


def _open_store(store_dir: str, *, create: bool) -> Any:
    from ..store.store import Store

    if not create and not os.path.exists(os.path.join(store_dir, ".meta", "db.sqlite")):
        return _NoStore(store_dir)
    return Store.open(store_dir)


def _print_plan(the_plan: Any, as_json: bool) -> None:
    from ..table import format_size

    if as_json:
        import json

        print(json.dumps(the_plan.to_json(), indent=2))
        return
    if the_plan.nothing_to_do:
        print("nothing to fetch or build: every output is valid")
        return
    if the_plan.to_substitute:
        n = len(the_plan.to_substitute)
        caches = ", ".join(sorted({s.cache.url for s in the_plan.to_substitute}))
        print(f"{_these(n, 'path')} will be substituted ({format_size(the_plan.substitute_download_size)} download, "
              f"{format_size(the_plan.substitute_nar_size)} unpacked) from {caches}:")
        for sub in the_plan.to_substitute:
            print(f"  {sub.path}  {format_size(sub.info.download_size).rjust(10)}")
        if not the_plan.to_build:
            print("nothing will be built")
            return
    if the_plan.to_fetch:
        from ..table import format_table

        n = len(the_plan.to_fetch)
        unknown = the_plan.unknown_sizes
        total = format_size(the_plan.download_size) + (f" + {unknown} of unknown size" if unknown else "")
        cached = sum(1 for f in the_plan.to_fetch if f.cached)
        held = f"; {cached} already cached" if cached else ""
        print(f"{_these(n, 'source')} will be fetched ({total} to download{held}):")
        rows = []
        for f in the_plan.to_fetch:
            choice = f.choice
            fetcher = choice.fetcher if choice is not None else "url"
            what = choice.what if choice is not None else f.name
            status = f"cached ({choice.cached})" if f.cached else format_size(f.download_size)
            rows.append([what, fetcher, status])
        print("\n".join("  " + line for line in format_table(["FILE", "FETCHER", "DOWNLOAD"], rows).splitlines()))
        notes = {r for f in the_plan.to_fetch if f.choice is not None for r in f.choice.passed_over}
        for note in sorted(notes):
            print(f"  passed over: {note}")
    print(f"{_these(len(the_plan.to_build), 'derivation')} will be built:")
    for drv in the_plan.to_build:
        print(f"  {drv.drv_path}")


def _these(n: int, noun: str) -> str:
    return f"this {noun}" if n == 1 else f"these {n} {noun}s"


# -- log ------------------------------------------------------------------------


def run_log(args: argparse.Namespace) -> int:
    from ..errors import StoreError

    text = args.path
    if _is_path(text) or os.path.lexists(text):
        log_file, what = _log_of_path(text, args.store)
    else:
        from ..lib.attrpath import parse_attrpath, resolve

        drv = derivation_of(resolve(pkgs_from_args(args), parse_attrpath(text)), text)
        log_file, what = _log_file(args.store or drv.store_dir, drv.drv_path), drv.name
    try:
        with open(log_file, "rb") as log:
            data = log.read()
    except FileNotFoundError:
        raise StoreError(f"no build log for {what}: it was not built in this store (no {log_file})") from None
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def _log_file(store_dir: str, drv_path: str) -> str:
    from types import SimpleNamespace

    from ..realise.realise import log_path

    return os.fspath(log_path(SimpleNamespace(store_dir=store_dir), SimpleNamespace(drv_path=drv_path)))


def _log_of_path(text: str, store_arg: str | None) -> tuple[str, str]:
    from ..errors import StoreError
    from ..store.store import Store, default_store_root

    full = os.path.realpath(text) if os.path.islink(text) else os.path.abspath(text)
    root = os.path.abspath(store_arg) if store_arg else _store_of(full) or os.path.abspath(default_store_root())
    if full.endswith(".drv"):
        return _log_file(root, full), full
    if not os.path.exists(os.path.join(root, ".meta", "db.sqlite")):
        raise StoreError(f"path '{full}' is not in the store {root} (there is no store there)")
    with Store.open(root) as store:
        info = store.query(text)
    if not info.deriver:
        raise StoreError(f"path '{info.path}' was not built from a derivation, so it has no build log")
    return _log_file(root, info.deriver), info.path


def _store_of(path: str) -> str | None:
    """The store `path` lies directly in, if its parent holds a store database."""
    parent = os.path.dirname(path)
    return parent if os.path.exists(os.path.join(parent, ".meta", "db.sqlite")) else None
