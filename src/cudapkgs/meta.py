"""`meta` for packages built from source: availability from assertions, as Nixpkgs' `_cuda.lib`.

Nixpkgs (pkgs/development/cuda-modules/_cuda/lib/meta.nix@19811afc): `meta.broken` is true
when any `passthru.brokenAssertions` fails (`_mkMetaBroken`), `meta.badPlatforms` is the
host system when any `passthru.platformAssertions` fails (`_mkMetaBadPlatforms`), and
`meta.problems` carries the failed messages ("Package <name> is marked as broken due to the
following failed assertions:" / "… is unsupported on this platform due to …").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from . import licenses
from .lib.fixpoint import AttrSet, Thunk, force, lazy

Assertion = Mapping[str, "Any"]  # {"message": str, "assertion": bool}


def failed(assertions: Sequence[Assertion]) -> list[str]:
    """The messages of the assertions that do not hold, in order."""
    return [a["message"] for a in assertions if not a["assertion"]]


class AssertionStream(Thunk):
    """A lazy list of assertions (a ``passthru.brokenAssertions`` value) that can also be read one
    at a time: forced, it is ``list(stream())``, as `lazy` would give; `assertions_hold` reads
    ``stream()`` only up to the first assertion that fails.  `stream` is a function returning an
    iterator of ``{"message", "assertion"}`` in the order of the list."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Callable[[], Iterable[Assertion]], label: str = "") -> None:
        super().__init__(lambda: list(stream()), label)
        self._stream = stream


def assertion_stream(stream: Callable[[], Iterable[Assertion]]) -> AssertionStream:
    """``lazy(lambda: list(stream()))``, readable one assertion at a time (`AssertionStream`)."""
    return AssertionStream(stream)


class _BrokenFlag(Thunk):
    """`source_meta`'s ``broken``, with a second way to the same answer: `holds` (every broken
    assertion holds), which stops at the first that fails; its answer is remembered (an error is not)."""

    __slots__ = ("_holds", "_held")

    def __init__(self, fn: Callable[[], bool], holds: Callable[[], bool]) -> None:
        super().__init__(fn)
        self._holds = holds
        self._held: bool | None = None

    def holds(self) -> bool:
        if self._held is None:
            self._held = bool(self._holds())
        return self._held


def _one_by_one(passthru: Any, key: str) -> Iterator[Assertion]:
    """The assertions of ``passthru[key]``: from its stream where the slot is an unforced
    `AssertionStream` (a package's own), else from the forced list (an overridden one)."""
    if isinstance(passthru, AttrSet) and key in passthru:
        slot = passthru.slot(key)
        if isinstance(slot, AssertionStream) and slot._fn is not None:
            return iter(slot._stream())
    return iter(force((passthru or {}).get(key)) or ())


def assertions_hold(package: Any) -> bool:
    """``not package.meta.broken``, for a caller that treats an evaluation error as broken.

    Where ``meta.broken`` is `source_meta`'s own, unforced, its ``brokenAssertions`` are read
    only up to the first that fails (an `AssertionStream`'s stream): the answer is the same, and
    an error past that assertion, which would have made ``meta.broken`` raise, is not reached,
    so a caller that counts an error as broken (``except CudapkgsError: broken``, as Nix's
    ``tryEval``) gets the same answer either way.  Errors raise (`CudapkgsError`) as
    ``meta.broken`` does.  Any other ``meta`` (an override, a redistributable's) is read as it is.
    """
    meta = package.meta
    if isinstance(meta, AttrSet) and "broken" in meta:
        slot = meta.slot("broken")
        if isinstance(slot, _BrokenFlag) and slot._fn is not None:
            return slot.holds()
    return not meta.get("broken")


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
        # Nixpkgs' check-meta decides an unfree license the configuration does not allow first, and
        # reads meta.broken only after it (pkgs/stdenv/generic/check-meta.nix@1494b459, checkValidity:
        # "unfree" before "broken"; `meta.available` is `validity.valid != "no"`): the assertions of an
        # unfree package that is not allowed are not evaluated to say that it is unavailable.
        if not (licenses.is_free(meta.get("license")) or config.permits_unfree(final)):
            return False
        if failed(passthru("brokenAssertions")) or failed(passthru("platformAssertions")):
            return False
        return system in meta["platforms"]

    return AttrSet(
        {
            **meta,
            "broken": _BrokenFlag(lambda: bool(failed(passthru("brokenAssertions"))),
                                  lambda: all(a["assertion"] for a in _one_by_one(final.passthru, "brokenAssertions"))),
            "badPlatforms": lazy(lambda: [system] if failed(passthru("platformAssertions")) else []),
            "problems": lazy(problems),
            "available": lazy(available),
            "teams": ["cuda"],
        },
        name=f"{final.name}.meta",
    )
