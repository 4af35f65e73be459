"""Lazy values, attribute sets, fixed points and scopes.

The evaluation model of Nixpkgs' ``lib/fixed-points.nix`` and
``lib/customisation.nix``: an attribute set knows its names up front, while
its values are thunks, computed on first read and remembered. A package set
is the fixed point of a function of its own final value, extended by
overlays ``(final, prev) -> attrs`` and populated through ``call_package``,
which injects a function's arguments by name.

The model is in three modules, as Nixpkgs' lib: `lazy` (thunks and attribute sets),
`fixed_points` (``lib/fixed-points.nix``) and `customisation` (``lib/customisation.nix``:
call_package, overriding, scopes).  Their public names are importable from here.
"""

from __future__ import annotations

from .customisation import Scope, call_package_with, make_overridable, make_scope
from .fixed_points import Extension, compose_extensions, compose_many_extensions, extends, fix, make_extensible
from .lazy import AttrSet, Thunk, force, lazy, recurse_into_attrs, recurses

__all__ = [
    "AttrSet",
    "Extension",
    "Scope",
    "Thunk",
    "call_package_with",
    "compose_extensions",
    "compose_many_extensions",
    "extends",
    "fix",
    "force",
    "lazy",
    "make_extensible",
    "make_overridable",
    "make_scope",
    "recurse_into_attrs",
    "recurses",
]
