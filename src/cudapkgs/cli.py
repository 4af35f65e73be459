"""The `cudapkgs` command: a thin layer over the library.

Each command group lives next to the code it drives and contributes its
sub-parser through a `register(subparsers)` function; those modules import only
argparse-level things at start-up so that `cudapkgs eval` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that add sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "cudapkgs.eval_cli",
    "cudapkgs.manifests_cli",
    "cudapkgs.doctor_cli",
    "cudapkgs.realise.cli",
    "cudapkgs.project_cli",
    "cudapkgs.store.cli",
    "cudapkgs.store.caches.cli",
    "cudapkgs.containers.cli",
)


# Which module registers each command: `cudapkgs eval ...` imports eval_cli alone and
# builds the eval parser alone (start-up speed, docs/benchmarks.md). A command missing
# here still works, through the full parser (tests/test_cli_startup.py keeps this complete).
COMMANDS: dict[str, str] = {
    "eval": "cudapkgs.eval_cli", "search": "cudapkgs.eval_cli", "list": "cudapkgs.eval_cli",
    "capabilities": "cudapkgs.eval_cli", "show-derivation": "cudapkgs.eval_cli", "config": "cudapkgs.eval_cli",
    "check-leakage": "cudapkgs.eval_cli", "manifests": "cudapkgs.manifests_cli", "doctor": "cudapkgs.doctor_cli",
    "build": "cudapkgs.realise.cli", "shell": "cudapkgs.realise.cli", "test": "cudapkgs.realise.cli",
    "log": "cudapkgs.realise.cli", "lock": "cudapkgs.project_cli", "gc": "cudapkgs.store.cli",
    "export": "cudapkgs.store.cli", "import": "cudapkgs.store.cli", "path-info": "cudapkgs.store.cli",
    "why-depends": "cudapkgs.store.cli", "verify": "cudapkgs.store.cli", "key": "cudapkgs.store.caches.cli",
    "copy": "cudapkgs.store.caches.cli", "serve": "cudapkgs.store.caches.cli", "plan": "cudapkgs.store.caches.cli",
    "cdi": "cudapkgs.containers.cli",
}  # fmt: skip


class _Skipped:
    """Stands in for the parsers of commands not invoked: every call is accepted and ignored."""

    def __getattr__(self, name: str) -> object:
        return self._ignore

    def _ignore(self, *args: object, **kwargs: object) -> _Skipped:
        return self


class _OnlyOne:
    """A sub-parsers action that really adds only the parser of ``wanted``."""

    def __init__(self, subparsers: argparse._SubParsersAction, wanted: str) -> None:  # type: ignore[type-arg]
        self._subparsers = subparsers
        self._wanted = wanted
        self.added = False

    def add_parser(self, name: str, **kwargs: object) -> object:
        if name != self._wanted:
            return _Skipped()
        self.added = True
        return self._subparsers.add_parser(name, **kwargs)

    def __getattr__(self, name: str) -> object:
        return getattr(self._subparsers, name)


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (its first non-option word), None for none or an option first."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
        if word in ("-h", "--help", "--version"):
            return None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: with ``command`` (one in `COMMANDS`), only that command's parser is
    built and only its module imported; else every command group is registered."""
    parser = argparse.ArgumentParser(
        prog="cudapkgs",
        description=(
            "Nixpkgs' CUDA package sets in Python: evaluate versioned CUDA releases "
            "(cudaPackages_12_8, cudaPackages, pkgsForCudaArch.sm_90, ...) from NVIDIA's "
            "redistributable manifests, build them into a content-addressed store without root, "
            "open development shells, run GPU tests, and make GPUs usable in containers (CDI). "
            "Start with `cudapkgs list`, `cudapkgs eval --help` or `cudapkgs build --help`."
        ),
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is not None and command in COMMANDS:
        only = _OnlyOne(subparsers, command)
        importlib.import_module(COMMANDS[command]).register(only)
        if only.added:
            return parser
        # the table is out of date: fall back to every command group
        parser = build_parser()
        return parser
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:  # a command group not built yet
            if error.name != module_name:
                raise
            continue
        module.register(subparsers)
    return parser


def _version() -> str:
    from . import __version__

    return f"cudapkgs {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from .errors import CudapkgsError

    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_of(words))
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    import os

    # Nothing cudapkgs writes is group- or world-writable, whatever the caller's umask (as Nix's 0022).
    os.umask(os.umask(0o022) | 0o022)
    try:
        return int(args.func(args) or 0)
    except CudapkgsError as error:
        print(f"cudapkgs: error: {_in_user_file(error)}{error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("cudapkgs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:  # a bug in cudapkgs: one line, the traceback only on request
        import os

        if os.environ.get("CUDAPKGS_DEBUG"):
            raise
        where = _in_user_file(error)
        if where:  # the user's own package or overlay file raised it (a lazy attribute, a phase)
            print(f"cudapkgs: error: {where}{type(error).__name__}: {error}", file=sys.stderr)
            return 1
        print(
            f"cudapkgs: internal error: {type(error).__name__}: {error} "
            "(this is a bug in cudapkgs; set CUDAPKGS_DEBUG=1 to see the traceback)",
            file=sys.stderr,
        )
        return 70


def _in_user_file(error: BaseException) -> str:
    """"FILE:LINE: " when the error was raised inside a user's package or overlay file, else ""."""
    if "cudapkgs.user_files" not in sys.modules:  # no user file was loaded
        return ""
    from .user_files import user_location

    where = user_location(error)
    return "" if where is None or str(error).startswith(where) else f"{where}: "


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
