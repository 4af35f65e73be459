"""fetchzip: an archive at a URL, named by the NAR hash of its unpacked tree (Nixpkgs' fetchzip).

``pkgs.fetchzip(url=…, hash="sha256-…", name=…)`` takes Nixpkgs' arguments
(pkgs/build-support/fetchzip/default.nix@0145c6da: ``stripRoot ? true``, output hash mode
recursive, ``name ? "source"``) and its hash verbatim. The builder tries each source mirror at
``nar/sha256/<hex NAR hash>.tar.gz`` and at the URL's file name, then the URL; every candidate is
unpacked by the project's safe unpacker and kept only with the declared NAR hash
(`unpacked_tree.fetch_tree`). Not supported (an error says so): postFetch, extraPostFetch.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path  # annotations; pathlib is imported where a path is made
    from typing import Any

from ..errors import EvalError
from ..package import Package
from .fixed_output import fixed_output_package
from .hashes import parse_hash

__all__ = ["fetchzip", "build"]

_UNSUPPORTED = ("postFetch", "extraPostFetch")


def fetchzip(pkgs: Any, *, url: str, hash: str | None = None, sha256: str | None = None, name: str = "source",
             stripRoot: bool = True, **unsupported: Any) -> Package:  # noqa: N803 - Nixpkgs' spelling
    """A package whose output is the archive's unpacked tree (its single top directory with
    ``stripRoot``). Raises `EvalError` for a URL that is not http(s), a malformed hash, both hash
    arguments, or an unsupported or unknown argument."""
    from urllib.parse import urlsplit  # here: forcing the top level's fetchzip (a listing) imports no URL parser

    where = f"fetchzip {url}"
    for key, value in unsupported.items():
        if key in _UNSUPPORTED and value in (None, ""):
            continue
        raise EvalError(f"{where}: {'unsupported' if key in _UNSUPPORTED else 'unknown'} argument {key!r}")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise EvalError(f"{where}: expected an http(s) URL")
    if hash and sha256:
        raise EvalError(f"{where}: give hash or sha256, not both")
    declared = parse_hash(hash or sha256, where=f"{where}: hash")
    from pathlib import Path

    file_name = Path(parts.path).name
    mirror_names = [f"nar/sha256/{declared.hex}.tar.gz"] + ([file_name] if file_name else [])
    return fixed_output_package(
        pkgs, name=name, builder="fetchzip", hash=declared, mode="recursive",
        attrs={"url": url, "stripRoot": bool(stripRoot), "mirrorNames": mirror_names},
    )


def build(drv: Any, ctx: Any, outputs: dict[str, Path]) -> None:
    """The fetchzip builder: the first mirror copy or the URL whose unpacked tree has the declared NAR hash."""
    from .unpacked_tree import fetch_tree, locations

    attrs = drv.attrs
    candidates = locations(drv, attrs.get("mirrorNames") or (), [attrs["url"]])
    fetch_tree(drv, ctx, outputs["out"], candidates, what=attrs["url"], strip_root=bool(attrs.get("stripRoot", True)))
