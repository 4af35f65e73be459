"""stdenv: `mk_derivation` with the host compiler as stdenv.cc (Nixpkgs' `stdenv.mkDerivation`).

Nixpkgs builds its stdenv from a compiler-less one (pkgs/stdenv/generic/default.nix takes
`cc` as an argument; the cc-wrapper itself is built by stdenvNoCC). The same here:
`generic.mk_derivation` takes `cc` as an input and knows no compiler; `cc_wrapper` builds
the wrapper with it (no `cc`); this module joins the two, so the room has no circle and
`stdenv` imports nothing above it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .generic import HOOKS, PHASES, DerivationPackage, OutputPath, _config_and_system, python_step
from .generic import mk_derivation as _mk_derivation

__all__ = [
    "PHASES", "HOOKS", "DerivationPackage", "OutputPath", "mk_derivation", "python_step", "default_cc", "_config_and_system",
]


def default_cc(final: Any, config: Any, system: str) -> Any:
    """stdenv.cc of a package (`cc_wrapper.default_cc`, imported only when a derivation needs it)."""
    from .cc_wrapper import default_cc as choose

    return choose(final, config, system)


def mk_derivation(
    pkgs_or_config: Any,
    attrs_fn: Any,
    *,
    system: str | None = None,
    name: str = "",
) -> DerivationPackage:
    """A package built from source by the generic builder, with stdenv.cc as an implicit native input.

    `pkgs_or_config` is a `Config` or a package tree (its `config` and `system` are used);
    `attrs_fn` is ``final -> attrs`` or a plain mapping (see `cudapkgs.stdenv.generic`).
    `stdenvCc` defaults to `default_cc`: the cc-wrapper of the compiler nvcc was set up with,
    else of the host's default compiler (None without one; a compiling build then fails).
    Raises `EvalError` for bad attributes when the derivation is evaluated.
    """
    return _mk_derivation(pkgs_or_config, attrs_fn, system=system, name=name, cc=default_cc)
