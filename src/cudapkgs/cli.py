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


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every command group registered."""
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

    parser = build_parser()
    args = parser.parse_args(argv)
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
