"""`llvmPackages_N`: the host's Clang N as Nixpkgs' `llvmPackages_N.{clang,stdenv}`.

Nixpkgs: pkgs/development/compilers/llvm/ (one `llvmPackages_N` per release; `.clang` the wrapped
compiler, `.stdenv` a stdenv whose cc is it). cuda-modules/backend.nix@1dbbce67 picks
``pkgs."llvmPackages_${version}".clang`` for backendCC when the default compiler is a Clang nvcc
does not accept. Here compilers come from the host (host/compiler.py): `llvmPackages_N.clang` is
the cc-wrapper of a ``clang-N`` (or ``clang``) of major N found on PATH, the same package
backendCC is when it chooses that compiler; without one, reading `.clang` or `.stdenv.cc` is an
evaluation error naming the Clangs found.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

#: The releases with an attribute (Nixpkgs' llvmPackages_12 … llvmPackages_21 at the commit above's era).
RELEASES = tuple(range(12, 22))


def llvm_packages(config: Any, system: str, major: int) -> Any:
    """The `llvmPackages_<major>` attribute set: `clang`, `stdenv` (`cc`, `hostPlatform`), `release_version`."""
    from ..lib.fixpoint import AttrSet, lazy

    def clang() -> Any:
        # imported here: forcing llvmPackages_N (a listing tells it from a package) finds no compiler
        from ..errors import EvalError
        from ..host.compiler import find_compilers
        from ..stdenv.cc_wrapper import cc_wrapper_for

        compilers, _default = find_compilers()
        found = [c for c in compilers if c.kind == "clang"]
        chosen = next((c for c in found if c.major == major), None)
        if chosen is None:
            have = ", ".join(c.describe() for c in found) or "none"
            raise EvalError(f"llvmPackages_{major}.clang: no Clang {major} on PATH (clang-{major} or clang); "
                            f"Clangs found: {have}. Install clang-{major} (e.g. apt-get install clang-{major})")
        return cc_wrapper_for(config, system, chosen.to_json())

    return AttrSet({
        "release_version": str(major),
        "clang": lazy(clang),
        "stdenv": lazy(lambda: AttrSet({"cc": lazy(clang), "hostPlatform": AttrSet({"system": system},
                                                                                    name="hostPlatform")},
                                       name=f"llvmPackages_{major}.stdenv")),
    }, name=f"llvmPackages_{major}")
