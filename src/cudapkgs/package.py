"""Package values: lazy attribute sets built as a fixed point over their own attributes.

`mk_package(lambda final_attrs: {...})` is Nixpkgs' `mkDerivation (finalAttrs: {...})`:
an attribute defined through `final_attrs` sees later `override_attrs` changes, so
bumping `version` also changes `name`. `override` (re-calling the function that made
the package, with other arguments) is attached by `lib.customisation.call_package_with`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import CudapkgsError, EvalError
from .lib.customisation import parameter_names
from .lib.fixpoint import AttrSet, extends, fix, force

_ABSENT = object()  # no such passthru attribute
# What AttrSet's class gives an attribute read before its slots (methods, attr_path): a package's
# attribute of such a name is read through getattr, as it always was.
_ATTRSET_NAMES = frozenset(dir(AttrSet))

AttrsFunction = Callable[[AttrSet], Mapping[str, "Any"]]
# override_attrs takes Nix's two spellings: prev -> attrs, or (final, prev) -> attrs.
AttrsOverride = Callable[..., Mapping[str, "Any"]]


class Package:
    """A package: read its attributes (`pkg.version`, `pkg.meta`) lazily."""

    __slots__ = ("_fn", "_attrs", "_name", "_override")

    def __init__(self, fn: AttrsFunction, *, name: str = "", override: Callable[..., Any] | None = None):
        self._fn = fn
        self._name = name
        self._attrs = fix(fn, name=name)
        self._override = override

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        attrs = self._attrs
        if attr not in attrs:
            found = self._from_passthru(attr)
            if found is not _ABSENT:
                return found
        elif attr not in _ATTRSET_NAMES:
            # What getattr(attrs, attr) gives (`AttrSet.__getattr__`), without the failed lookup it makes
            # first: CPython 3.11 formats an AttributeError for each (about 2,500 instructions; a cold
            # `list --all` reads 1,400 package attributes: docs/eval-cache.md, "Without the cache")
            return attrs[attr]
        return getattr(attrs, attr)

    def __getitem__(self, attr: str) -> Any:
        attrs = self._attrs
        if attr not in attrs:
            found = self._from_passthru(attr)
            if found is not _ABSENT:
                return found
        return attrs[attr]

    def _from_passthru(self, attr: str) -> Any:
        """``passthru.<attr>`` for a name the package's attributes lack, else `_ABSENT`: Nixpkgs'
        mkDerivation returns the derivation ``// passthru`` (pkgs/stdenv/generic/make-derivation.nix,
        ``extendDerivation … ({ inherit meta passthru overrideAttrs; } // passthru)``), so
        ``torch.tests`` and ``torch.cudaPackages`` read what ``torch.passthru`` holds."""
        attrs = self._attrs
        if attr == "passthru" or "passthru" not in attrs:
            return _ABSENT
        passthru = force(attrs["passthru"])
        if isinstance(passthru, Mapping) and attr in passthru:
            return passthru[attr]
        return _ABSENT

    def __contains__(self, attr: object) -> bool:
        return attr in self._attrs

    def __iter__(self) -> Iterator[str]:
        return iter(self._attrs)

    def attribute_names(self) -> list[str]:
        """The names readable on this package (for listings and suggestions): its attributes, then
        its passthru's (readable at the top level too)."""
        names = list(self._attrs)
        if "passthru" in self._attrs:
            try:
                passthru = force(self._attrs["passthru"])
            except CudapkgsError:
                passthru = None
            if isinstance(passthru, Mapping):
                names += [str(n) for n in passthru if n not in self._attrs]
        if self._override is not None:
            names.append("override")
        return names

    @property
    def attrs(self) -> AttrSet:
        """The package's final attribute set."""
        return self._attrs

    def override_attrs(self, change: AttrsOverride | Mapping[str, Any]) -> "Package":
        """A new package with `change` merged over the attributes (Nixpkgs' overrideAttrs)."""
        extension = _as_extension(change)
        new_override = None
        if self._override is not None:
            outer = self._override
            new_override = lambda *a, **kw: outer(*a, **kw).override_attrs(change)  # noqa: E731
        return Package(extends(extension, self._fn), name=self._name, override=new_override)

    def override(self, *args: Any, **kwargs: Any) -> Any:
        """Re-make the package with other arguments (only for `call_package` results)."""
        if self._override is None:
            raise EvalError(f"{self._name or 'this package'} was not made by call_package, so it has no .override")
        return self._override(*args, **kwargs)

    def _with_override(self, override_fn: Callable[..., Any]) -> "Package":
        return Package(self._fn, name=self._name, override=override_fn)

    def named(self, name: str) -> "Package":
        """The same package, reported under another attribute path in messages."""
        return Package(self._fn, name=name, override=self._override)

    def to_json(self) -> dict[str, Any]:
        """A summary for `--json`: identity, outputs and meta (never the gated src)."""
        summary: dict[str, Any] = {}
        for key in ("name", "pname", "version", "outputs", "meta"):
            if key in self._attrs:
                summary[key] = self._attrs[key]
        return summary

    def __str__(self) -> str:
        """The package's ``outPath``: a package in a string is its store path, as Nix's string
        interpolation makes ``"${torch}/lib"`` (Nix manual, "String interpolation": a derivation
        interpolates to its ``outPath``), so ``f"{ps.torch}/lib"`` is a directory of the store.

        Raises `EvalError` naming the package when it has no ``outPath`` (a plain attribute set
        made with `mk_package`, not a derivation), or when evaluating it fails (its reason kept).
        """
        if "outPath" not in self._attrs:
            raise EvalError(f"{self._name or 'this package'} has no outPath (it is not a derivation), so it cannot "
                            "be used in a string; use one of its attributes")
        path = force(self._attrs["outPath"])
        if not isinstance(path, str):
            raise EvalError(f"{self._name or 'this package'}.outPath is not a string ({type(path).__name__})")
        return path

    def __format__(self, spec: str) -> str:
        """``f"{pkg}"`` is ``str(pkg)``, the ``outPath`` (a format spec applies to that string)."""
        return format(str(self), spec)

    def __repr__(self) -> str:
        name = self._attrs.slot("name") if "name" in self._attrs else None
        return f"<Package {self._name or '?'}{'' if not isinstance(name, str) else ' ' + name}>"


def _as_extension(change: AttrsOverride | Mapping[str, Any]):
    if isinstance(change, Mapping):
        return lambda final, prev: change
    try:
        arity = len(parameter_names(change))
    except (TypeError, ValueError):
        arity = 1
    if arity >= 2:
        return change
    return lambda final, prev: change(prev)


def mk_package(fn: AttrsFunction | Mapping[str, Any], *, name: str = "") -> Package:
    """Make a package from `final_attrs -> attrs` (or a plain mapping of attributes)."""
    if isinstance(fn, Mapping):
        attrs = fn
        return Package(lambda final: attrs, name=name)
    return Package(fn, name=name)
