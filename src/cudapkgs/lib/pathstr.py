"""POSIX paths as `pathlib` writes them, without importing pathlib.

`pathlib` (with the `urllib.parse` and `ipaddress` it imports) is about 16 M instructions of a
cold `cudapkgs list --all` (docs/eval-cache.md, issue 34 item 4); where an evaluation only
needs the text `str(Path(...))` would give, these functions give the same text.  The rules are
CPython's `pathlib._PosixFlavour.splitroot` and `PurePath._parse_args` (3.10-3.12): a path
starting with exactly two slashes keeps both (POSIX leaves their meaning to the
implementation), one or three and more are one; empty and "." components are dropped; ".."
is kept (a symlink before it decides where it leads); the empty path is ".".
"""

from __future__ import annotations

__all__ = ["join", "name", "normal", "parent"]


def _split(path: str) -> tuple[str, list[str]]:
    stripped = path.lstrip("/")
    slashes = len(path) - len(stripped)
    root = "//" if slashes == 2 else "/" if slashes else ""
    return root, [part for part in stripped.split("/") if part and part != "."]


def normal(path: str) -> str:
    """``str(PurePosixPath(path))``."""
    root, parts = _split(path)
    return (root + "/".join(parts)) or "."


def join(*paths: str) -> str:
    """``str(PurePosixPath(*paths))``: an absolute argument starts the path again."""
    root, parts = "", []
    for path in paths:
        more_root, more = _split(path)
        if more_root:
            root, parts = more_root, more
        else:
            parts.extend(more)
    return (root + "/".join(parts)) or "."


def name(path: str) -> str:
    """``PurePosixPath(path).name``: the last component, "" for a root or the empty path."""
    _root, parts = _split(path)
    return parts[-1] if parts else ""


def parent(path: str) -> str:
    """``str(PurePosixPath(path).parent)``: a root or "." is its own parent."""
    root, parts = _split(path)
    return (root + "/".join(parts[:-1])) or "."
