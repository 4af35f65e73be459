"""`cudapkgs log`: print the build log of a store path, a derivation or a package.

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..derivation import derivation_of
from .eval import CONFIG_HELP, add_eval_options, pkgs_from_args
from .installables import _is_path

EPILOG_LOG = """\
examples:
  cudapkgs log ./result
  cudapkgs log /path/to/store/<hash>-cuda13.0-cuda_nvcc-13.0.88
  cudapkgs log /path/to/store/<hash>-cuda13.0-cuda_nvcc-13.0.88.drv
  cudapkgs log --set allowUnfree=true cudaPackages_13_0.cuda_nvcc   (also after a failed build)
"""

STORE_HELP = "the store root (default: the one PATH lies in, else $CUDAPKGS_STORE, else $XDG_DATA_HOME/cudapkgs/store)"


def register(subparsers: Any) -> None:
    """Add `log` to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
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
    add_eval_options(p, json_flag=False, store_help=STORE_HELP)
    p.set_defaults(func=run_log)


def run_log(args: argparse.Namespace) -> int:
    from ..errors import StoreError

    text = args.path
    if _is_path(text) or os.path.lexists(text):
        log_file, what = _log_of_path(text, args.store)
    else:
        from ..lib.attrpath import parse_attrpath, resolve

        drv = derivation_of(resolve(pkgs_from_args(args), parse_attrpath(text)), text)
        log_file, what = _log_file(args.store or drv.store_dir, drv.drv_path), drv.name
    from ..errors import shown
    from ..inputs import open_regular

    # The store may be one found from the path itself (`_store_of`), which a cloned repository can
    # carry with its own `result` link: its log is read only as a regular file (a link there to a FIFO
    # hung, one to /dev/zero filled memory), and shown on a terminal with every control character
    # escaped (a build's output, or a planted log, could otherwise act on the terminal: OSC 52 writes
    # the clipboard). Into a pipe or a file the bytes go as they are.
    try:
        fd = open_regular(log_file, blocking=True)
    except FileNotFoundError:
        raise StoreError(f"no build log for {what}: it was not built in this store (no {log_file})") from None
    except OSError as error:
        raise StoreError(f"cannot read the build log of {what}: {error.strerror or error}") from None
    with open(fd, "rb") as log:
        if sys.stdout.isatty():
            import codecs

            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split between reads
            while chunk := log.read(1 << 20):
                sys.stdout.write(shown(decoder.decode(chunk), lines=True))
            sys.stdout.write(shown(decoder.decode(b"", final=True), lines=True))
        else:
            while chunk := log.read(1 << 20):
                sys.stdout.buffer.write(chunk)
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
    with Store.open(root, read_only=True) as store:  # a query: nothing written to a store found from the path
        info = store.query(text)
    if not info.deriver:
        raise StoreError(f"path '{info.path}' was not built from a derivation, so it has no build log")
    return _log_file(root, info.deriver), info.path


def _store_of(path: str) -> str | None:
    """The store `path` lies directly in, if its parent holds a store database."""
    parent = os.path.dirname(path)
    return parent if os.path.exists(os.path.join(parent, ".meta", "db.sqlite")) else None
