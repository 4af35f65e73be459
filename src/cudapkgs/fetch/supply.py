"""Which configured fetcher can supply an NVIDIA redistributable, decided from names alone.

The answer needs no network, no cache and no file system, so evaluation can use it:
a component no configured fetcher can supply is unavailable (`meta.available` is
false), as Nixpkgs' buildRedist makes a component without a release unavailable
(``src = null``; pkgs/development/cuda-modules/buildRedist/default.nix@1ac181a1).

* ``redist`` (NVIDIA's server) has every archive a manifest names;
* ``mirror:<dir or URL>`` is laid out like it, so it is expected to have them too
  (the plan, `cudapkgs.fetch.planning.choose_source`, looks for the file in a directory);
* ``wheels`` has what NVIDIA publishes on PyPI (`cudapkgs.fetch.wheel_lookup.wheel_for`):
  not every component, not Jetson's, and CUDA 12's nvcc wheel without ``nvcc``.

Whether a host answers is not known here: the plan says which were not tried.
"""

from __future__ import annotations

from collections.abc import Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..lib.records import FrozenRecord
from .wheel_lookup import first_on_pypi, pypi_name, unused_wheel, wheel_for, wheel_lacks, wheel_lacks_note

__all__ = ["KNOWN_FETCHERS", "Supply", "could_supply", "describe", "no_fetcher_message", "supply", "supplies"]

#: The fetcher names the ``fetchers`` config key takes, as its error message lists them.
KNOWN_FETCHERS = ('"redist"', '"mirror:<dir or URL prefix>"', '"wheels"')

# Where a redist system's archives come from as wheels: the wheel's machine, or None (no wheels).
_WHEEL_MACHINE = {"linux-x86_64": "x86_64", "linux-sbsa": "aarch64", "linux-aarch64": None}


class Supply(FrozenRecord):
    """What one fetcher would do for one source.

    ``fetcher``: the configured name; ``file``: what it would fetch (the archive's name, or
    ``project==version`` for a wheel), None when it cannot; ``reason``: why it cannot, one
    clause, None when it can; ``size``: bytes it would download when known (the archive's
    for ``redist`` and mirrors; None for a wheel, whose size only the index knows).
    """

    __slots__ = ("fetcher", "file", "reason", "size")
    fetcher: str
    file: str | None
    reason: str | None
    size: int | None

    def __init__(self, fetcher: str, file: str | None, reason: str | None, size: int | None = None) -> None:
        _set = object.__setattr__  # one by one (not `_init`): an evaluation makes one per component and fetcher
        _set(self, "fetcher", fetcher)
        _set(self, "file", file)
        _set(self, "reason", reason)
        _set(self, "size", size)

    @property
    def can(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict[str, Any]:
        return {"fetcher": self.fetcher, "file": self.file, "size": self.size, "reason": self.reason}


def supply(
    fetcher: str,
    *,
    product: str,
    pname: str,
    version: str,
    cuda_major: int,
    relative_path: str,
    redist_system: str,
    size: int | None = None,
) -> Supply:
    """The `Supply` of ``fetcher`` for the archive ``relative_path`` (of ``redist_system``:
    ``linux-x86_64``, ``linux-sbsa``, ``linux-aarch64``; ``linux-all`` and ``source`` are the
    host's) of component ``pname`` ``version`` of ``product``, for CUDA ``cuda_major``.
    ``size`` is the archive's size in bytes (the manifest's)."""
    name = relative_path.rsplit("/", 1)[-1]
    kind, _, where = fetcher.partition(":")
    if fetcher == "redist" or (kind == "mirror" and where):
        return Supply(fetcher, name, None, size)
    if fetcher != "wheels":
        return Supply(fetcher, None, f"unknown fetcher (use {', '.join(KNOWN_FETCHERS)})")
    if _WHEEL_MACHINE.get(redist_system, "") is None:
        return Supply(fetcher, None, "no wheels for Jetson (linux-aarch64) releases")
    found = wheel_for(product, pname, cuda_major, version)
    if found is None:
        project = pypi_name(product, pname, cuda_major)
        if project is None:
            unused = unused_wheel(product, pname, cuda_major)
            if unused is not None:
                return Supply(fetcher, None, f"{unused} is on PyPI, but cudapkgs does not take it as the archive's "
                              "stand-in yet (its layout and versions are unchecked)")
            return Supply(fetcher, None, f"NVIDIA publishes no PyPI wheel of {pname} for CUDA {cuda_major}")
        return Supply(fetcher, None, f"{project} has no {version} on PyPI (its first is {first_on_pypi(project)})")
    project, wheel_version = found
    lacks = wheel_lacks(pname, cuda_major)
    if lacks:
        note = wheel_lacks_note(pname, cuda_major)
        return Supply(fetcher, None, f"{project} {wheel_version} lacks {', '.join(lacks)}" + (f": {note}" if note else ""))
    return Supply(fetcher, f"{project}=={wheel_version}", None)


def supplies(fetchers: Sequence[str], **source: Any) -> list[Supply]:
    """`supply` of each of ``fetchers``, in order (the same keyword arguments)."""
    return [supply(f, **source) for f in fetchers]


def could_supply(fetchers: Sequence[str], **source: Any) -> list[str]:
    """The fetchers not in ``fetchers`` that could supply the source, as the config key spells them."""
    kinds = {f.partition(":")[0] for f in fetchers}
    found = []
    if "redist" not in kinds:
        found.append('"redist" (NVIDIA\'s server)')
    if "mirror" not in kinds:
        found.append('"mirror:<dir or URL>"')
    if "wheels" not in kinds and supply("wheels", **source).can:
        found.append('"wheels"')
    return found


def describe(results: Sequence[Supply]) -> str:
    """Why none of ``results`` can supply its source: ``"wheels: <reason>; ..."``."""
    from ..errors import shown_cache_url  # a mirror:https://user:token@… is shown with user:***@

    return "; ".join(f"{shown_cache_url(r.fetcher)}: {r.reason}" for r in results if not r.can) or "no fetchers configured"


def no_fetcher_message(name: str, results: Sequence[Supply], fetchers: Sequence[str], could: Sequence[str]) -> str:
    """The one-line error for a source ``name`` that no configured fetcher supplies."""
    import json

    from ..errors import shown_cache_url

    others = f"fetchers that could: {', '.join(could)}" if could else "no fetcher could"
    return (f"no configured fetcher can supply {name} ({describe(results)}); {others} "
            f"(config key `fetchers`, now {json.dumps([shown_cache_url(f) for f in fetchers])})")
