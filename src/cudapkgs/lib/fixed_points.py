"""Fixed points and extensions, as Nixpkgs' ``lib/fixed-points.nix``.

A package set is the fixed point of a function of its own final value (`fix`), extended by
overlays ``(final, prev) -> attrs`` (`extends`, `compose_extensions`, `make_extensible`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .lazy import AttrSet, _raw_slots, _Unfinished

__all__ = ["Extension", "compose_extensions", "compose_many_extensions", "extends", "fix", "make_extensible"]

Extension = Callable[[AttrSet, AttrSet], Mapping[str, "Any"]]


def _tie(final: AttrSet, f: Callable[[Any], Mapping[str, Any]]) -> Any:
    # Until f returns, final has no names, so reading it can only be recursion.
    final._slots = _Unfinished(final._name)
    attrs = f(final)
    final._slots = dict(attrs) if not isinstance(attrs, AttrSet) else attrs._slots
    return final


def fix(f: Callable[[AttrSet], Mapping[str, Any]], *, name: str = "") -> AttrSet:
    """The set ``final`` whose slots are ``f(final)`` (lib.fix)."""
    final = object.__new__(AttrSet)
    final._name = name
    return _tie(final, f)


def _as_attrset(attrs: Mapping[str, Any], name: str) -> AttrSet:
    if isinstance(attrs, AttrSet):
        return attrs
    new = object.__new__(AttrSet)
    new._slots = dict(_raw_slots(attrs))
    new._name = name
    return new


def extends(
    ext: Extension, f: Callable[[AttrSet], Mapping[str, Any]]
) -> Callable[[AttrSet], AttrSet]:
    """Layer ``ext`` over ``f``: ``final -> prev | ext(final, prev)`` with ``prev = f(final)``."""

    def extended(final: AttrSet) -> AttrSet:
        prev = _as_attrset(f(final), final._name)
        return prev.update(ext(final, prev))

    return extended


def compose_extensions(f: Extension, g: Extension) -> Extension:
    """One extension doing ``f`` and then ``g``, which sees ``f``'s result as prev."""

    def composed(final: AttrSet, prev: AttrSet) -> Mapping[str, Any]:
        f_attrs = _raw_slots(f(final, prev))
        g_attrs = _raw_slots(g(final, prev.update(f_attrs)))
        return {**f_attrs, **g_attrs}

    return composed


def _identity_extension(final: AttrSet, prev: AttrSet) -> Mapping[str, Any]:
    return {}


def compose_many_extensions(exts: Iterable[Extension]) -> Extension:
    """Compose extensions left to right; the identity for none."""
    exts = list(exts)
    if not exts:
        return _identity_extension
    return functools.reduce(compose_extensions, exts)


def make_extensible(f: Callable[[AttrSet], Mapping[str, Any]], *, name: str = "") -> AttrSet:
    """``fix(f)`` plus an ``extend`` attribute: ``x.extend(ext)`` is ``make_extensible(extends(ext, f))``."""

    def extend(ext: Extension) -> AttrSet:
        return make_extensible(extends(ext, f), name=name)

    def with_extend(final: AttrSet) -> Mapping[str, Any]:
        return {**_raw_slots(f(final)), "extend": extend}

    return fix(with_extend, name=name)
