"""What the build-like commands (build, shell, log, plan --what-if) are given: packages, evaluated first.

An argument is an attribute path, a store path or a saved derivation (``.json``); with none,
the project's packages (cudapkgs.toml, checked against cudapkgs.lock).  Every evaluation
error is raised before anything is fetched or built.  Also the options these commands share
(``-j``, ``--project``/``--ignore-lock``, ``--builders``).

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..derivation import derivation_of
from .eval import pkgs_from_args


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


class Installable:
    """One command-line argument, evaluated: a derivation, or a store path given by hand.

    A plain class, not a dataclass: importing dataclasses (and inspect with it) cost a build 14 ms
    of start-up (docs/bench-speed.md)."""

    __slots__ = ("label", "drv", "path")

    def __init__(self, label: str, drv: Any = None, path: str | None = None) -> None:
        self.label = label
        self.drv = drv  # cudapkgs.derivation.Derivation
        self.path = path

    def __repr__(self) -> str:
        return f"Installable({self.label!r}, drv={self.drv!r}, path={self.path!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Installable):
            return NotImplemented
        return (self.label, self.drv, self.path) == (other.label, other.drv, other.path)

    def __hash__(self) -> int:
        return hash((self.label, self.path))

    @property
    def outputs(self) -> dict[str, str]:
        return dict(self.drv.outputs) if self.drv is not None else {"out": self.path or ""}


def _is_path(text: str) -> bool:
    return "/" in text and not text.startswith(('"', "'"))


def evaluate(args: argparse.Namespace) -> tuple[str, list[Installable]]:
    """The store directory and every argument's derivation; any evaluation error is raised here, before building."""
    from ..lib.attrpath import parse_attrpath, resolve
    from ..store.location import default_store_dir

    pkgs = pkgs_from_args(args)
    store_dir = default_store_dir(pkgs.config)
    args.evaluated_fetchers = list(pkgs.config.fetchers)  # for `without_fetchers`
    from ..errors import UnavailablePackageError

    items = []
    unavailable: list[str] = []  # every argument that cannot be had is named, not only the first
    for text in args.attrpaths:
        if text.endswith(".json") and os.path.exists(text):
            # Hostile input: checked field by field, and only for the configured store.
            items.append(Installable(text, drv=_derivation_from_file(text, store_dir)))
        elif _is_path(text):
            items.append(Installable(text, path=text))
        else:
            try:
                items.append(Installable(text, drv=derivation_of(resolve(pkgs, parse_attrpath(text)), text)))
            except UnavailablePackageError as error:
                if len(args.attrpaths) == 1:
                    raise
                unavailable.append(str(error))
    if unavailable:
        found = list(dict.fromkeys(unavailable))
        head = "cannot build: " if len(found) == 1 else f"cannot build {len(found)} packages:\n  "
        raise UnavailablePackageError(head + "\n  ".join(found))
    return store_dir, items


def without_fetchers(args: argparse.Namespace) -> Any:
    """A ``reevaluate`` for `build.realise_and_link`: given the fetchers a plan skipped (their host did
    not answer), evaluate the arguments again with config ``fetchers`` less those, and return the new
    installables; None when no fetcher would be left or the arguments name no attribute paths.

    Evaluation depends on the fetchers (a component no configured fetcher supplies is unavailable;
    triton takes ``cuda_nvcc``'s ptxas (its host-compiler-free variant), else ``cuda_nvcc_wheel``'s), so a machine where NVIDIA's
    server does not answer gets what ``fetchers = ["wheels"]`` would have given.
    """
    import json

    def reevaluate(skipped: Any) -> Any:
        before = list(getattr(args, "evaluated_fetchers", None) or ())
        left = [f for f in before if f not in set(skipped)]
        if not left or left == before or not getattr(args, "attrpaths", None):
            return None
        again = argparse.Namespace(**vars(args))
        again.sets = [*(args.sets or []), f"fetchers={json.dumps(left)}"]
        return evaluate(again)[1]

    return reevaluate


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
    from ..errors import EvalError, UsageError, shown
    from .project import check_against_lock, project_environment

    if getattr(args, "files", None) or getattr(args, "args", None):
        raise UsageError("-f/--arg need packages to name; a project lists its files in cudapkgs.toml (files = [...])")
    env = project_environment(args)
    args.project_env = env  # its substituters and keys (build.substituters_from_args)
    if not env.project.lock_file.exists():
        print(shown(f"cudapkgs: note: {env.project.file} has no lock beside it; `cudapkgs lock` pins this environment"),
              file=sys.stderr)
    differences = check_against_lock(env)
    if differences and not args.ignore_lock:
        # The lock is not covered by `cudapkgs allow`: each difference on its own line, escaped (issue 30, item 7).
        lines = "\n".join(f"  {shown(line)}" for line in differences)
        raise EvalError(
            f"this machine does not reproduce {env.project.lock_file}:\n{lines}\n"
            "(`cudapkgs lock` to accept this machine's environment, --ignore-lock to enter it anyway)"
        )
    if differences:
        print(shown(f"cudapkgs: warning: the environment differs from {env.project.lock_file} "
                    f"({len(differences)} differences)"), file=sys.stderr)
    items = [Installable(label, drv=derivation_of(pkg, label)) for label, pkg in env.packages.items()]
    return default_store_dir(env.config), items
