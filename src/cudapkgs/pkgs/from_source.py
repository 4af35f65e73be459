"""The common shape of CUDA packages Nixpkgs builds from source inside each set.

Nixpkgs' expressions (pkgs/development/cuda-modules/packages/{nccl,gdrcopy,cutlass,…}.nix) share
one pattern: `name = "<cudaNamePrefix>-<pname>-<version>"`, `fetchFromGitHub` with a pinned hash,
`__structuredAttrs`/`strictDeps`, meta with `platforms = ["aarch64-linux" "x86_64-linux"]`,
and assertions turned into `meta.broken` / `meta.badPlatforms`. `source_package` builds that
with `mk_derivation`.

Inputs the top level does not provide (cmake, ninja, mpi, … where no package exists yet) are
named in `externals`: a missing one becomes the broken assertion "<name> is available", the
wording of Nixpkgs' `_cuda.lib._mkMissingPackagesAssertions` (_cuda/lib/assertions.nix@114a56c2),
so the package evaluates everywhere and says why it cannot be built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..lib.fixpoint import AttrSet, lazy
from ..stdenv import DerivationPackage, mk_derivation
from ..meta import source_meta

PLATFORMS = ["aarch64-linux", "x86_64-linux"]


def resolve_externals(top: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """name -> the top level's package of that name, or None when it has none."""
    found = {}
    for name in names:
        value = top.get(name) if hasattr(top, "get") else None
        found[name] = value
    return found


def missing_assertions(externals: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`_mkMissingPackagesAssertions`: one failing "<name> is available" per absent input."""
    return [{"message": f"{name} is available", "assertion": False} for name, v in externals.items() if v is None]


def source_package(
    *,
    config: Any,
    system: str,
    cuda_name_prefix: str,
    pname: str,
    version: str,
    fetch: Callable[[], Any],
    meta: Mapping[str, Any],
    attrs: Callable[[AttrSet], Mapping[str, Any]],
    externals: Mapping[str, Any] | None = None,
    broken_assertions: Callable[[], list[dict[str, Any]]] = list,
    platform_assertions: Callable[[], list[dict[str, Any]]] = list,
    passthru: Callable[[AttrSet], Mapping[str, Any]] | None = None,
) -> DerivationPackage:
    """A from-source member of a CUDA set; see the module docstring.

    `fetch` returns the `src` (a fetchFromGitHub package); `attrs(final)` gives the build's own
    attributes (inputs, phases, flags); `externals` maps input names to packages or None.
    """
    externals = dict(externals or {})

    def all_attrs(final: AttrSet) -> dict[str, Any]:
        extra = passthru(final) if passthru is not None else {}
        return {
            "pname": pname,
            "version": version,
            "name": lazy(lambda: f"{cuda_name_prefix}-{final.pname}-{final.version}"),
            "src": lazy(fetch),
            **attrs(final),
            "passthru": AttrSet(
                {
                    "brokenAssertions": lazy(lambda: missing_assertions(externals) + broken_assertions()),
                    "platformAssertions": lazy(platform_assertions),
                    **extra,
                },
                name=f"{cuda_name_prefix}.{pname}.passthru",
            ),
            "meta": lazy(lambda: source_meta(final, config, system, {"platforms": PLATFORMS, **meta})),
        }

    return mk_derivation(config, all_attrs, system=system, name=f"{cuda_name_prefix}.{pname}")


def present(*packages: Any) -> list[Any]:
    """The packages that exist (an absent external input is left out of an input list)."""
    return [p for p in packages if p is not None]


def cmake_bool(name: str, value: bool) -> str:
    """`lib.cmakeBool`: -DNAME:BOOL=TRUE|FALSE."""
    return f"-D{name}:BOOL={'TRUE' if value else 'FALSE'}"


def cmake_feature(name: str, value: str) -> str:
    """`lib.cmakeFeature`: -DNAME:STRING=value."""
    return f"-D{name}:STRING={value}"


CMAKE_CONFIGURE = """\
cmake -S . -B build -G Ninja -DCMAKE_INSTALL_PREFIX="$out" -DCMAKE_BUILD_TYPE=Release "${cmakeFlags[@]}"
"""
CMAKE_BUILD = 'cmake --build build -j"$NIX_BUILD_CORES"\n'
CMAKE_INSTALL = "cmake --install build\n"
