"""`meta` for packages built from source: availability from assertions, as Nixpkgs' `_cuda.lib`.

Nixpkgs (pkgs/development/cuda-modules/_cuda/lib/meta.nix@19811afc): `meta.broken` is true
when any `passthru.brokenAssertions` fails (`_mkMetaBroken`), `meta.badPlatforms` is the
host system when any `passthru.platformAssertions` fails (`_mkMetaBadPlatforms`), and
`meta.problems` carries the failed messages ("Package <name> is marked as broken due to the
following failed assertions:" / "… is unsupported on this platform due to …").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from . import licenses
from .lib.fixpoint import AttrSet, force, lazy

Assertion = Mapping[str, "Any"]  # {"message": str, "assertion": bool}


def failed(assertions: Sequence[Assertion]) -> list[str]:
    """The messages of the assertions that do not hold, in order."""
    return [a["message"] for a in assertions if not a["assertion"]]


def source_meta(final: Any, config: Any, system: str, meta: Mapping[str, Any]) -> AttrSet:
    """`meta` of a from-source package: the given fields plus broken, badPlatforms, problems, available.

    `final` is the package's attribute fixed point; its `passthru` may hold
    `brokenAssertions` and `platformAssertions` (lists of {message, assertion}).
    `meta["platforms"]` (Nix systems) is required.
    """

    def passthru(key: str) -> list[Assertion]:
        return list(force((final.passthru or {}).get(key)) or ())

    def problems() -> dict[str, dict[str, str]]:
        found = {}
        broken = failed(passthru("brokenAssertions"))
        if broken:
            found["broken"] = {
                "kind": "broken",
                "message": f"Package {final.name} is marked as broken due to the following failed assertions:"
                + "".join("\n- " + m for m in broken),
            }
        unsupported = failed(passthru("platformAssertions"))
        if unsupported:
            found["unsupported"] = {
                "kind": "unsupported",
                "message": f"Package {final.name} is unsupported on this platform due to the following "
                "failed assertions:" + "".join("\n- " + m for m in unsupported),
            }
        if system not in meta["platforms"]:
            found.setdefault("unsupported", {
                "kind": "unsupported",
                "message": f"Package {final.name} is not available on {system} (meta.platforms: "
                + ", ".join(meta["platforms"]) + ")",
            })
        return found

    def available() -> bool:
        if failed(passthru("brokenAssertions")) or failed(passthru("platformAssertions")):
            return False
        if system not in meta["platforms"]:
            return False
        license_value = meta.get("license")
        return licenses.is_free(license_value) or config.permits_unfree(final)

    return AttrSet(
        {
            **meta,
            "broken": lazy(lambda: bool(failed(passthru("brokenAssertions")))),
            "badPlatforms": lazy(lambda: [system] if failed(passthru("platformAssertions")) else []),
            "problems": lazy(problems),
            "available": lazy(available),
            "teams": ["cuda"],
        },
        name=f"{final.name}.meta",
    )
