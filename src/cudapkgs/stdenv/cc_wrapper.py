"""stdenv.cc: a derivation holding wrapper scripts around one host compiler (Nixpkgs' wrapCC).

The compiler comes from the host (as the stdenv's tools do here); its kind,
version and paths are derivation attributes, so another compiler gives another
store path.  The output is ``bin/{cc,c++,gcc,g++}`` (or the clang names) and
``nix-support/cc-wrapper.json``; every mk_derivation package has it as an
implicit native input (`stdenvCc`), and `cudapkgs shell` puts it on PATH.
"""

from __future__ import annotations

import functools
import json
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..hooks import cc_wrapper as hook
from ..lib.fixpoint import AttrSet, force
from ..package import Package
from ..host import compiler as host_compiler

__all__ = ["cc_wrapper", "cc_wrapper_for", "default_cc"]

INSTALL = r"""
mkdir -p "$out/bin" "$out/nix-support"
for n in "${!wrapperScripts[@]}"; do
  printf '%s' "${wrapperScripts[$n]}" > "$out/bin/$n"
  chmod 755 "$out/bin/$n"
done
printf '%s\n' "$ccWrapperInfo" > "$out/nix-support/cc-wrapper.json"
"""


def cc_wrapper(config: Any, system: str, compiler: host_compiler.Compiler,
               libs_from: dict[str, Any] | None = None) -> Any:
    """The cc-wrapper package of `compiler` (uncached; see `cc_wrapper_for`).

    `libs_from` (useLibsFrom: the default compiler's JSON with its `host_compiler.cxx_runtime`,
    ``libDirs`` and ``runPath``) makes every link use that compiler's C++ runtime
    (`hooks.cc_wrapper.wrapper_script`); it is a derivation attribute, so it gives another store path.
    Raises ValueError for a relative or comma-holding directory in it."""
    from .generic import mk_derivation

    scripts = {
        name: hook.wrapper_script(compiler.cxx if cxx else compiler.cc, compiler.describe(),
                                  libs_from=libs_from, cxx=cxx)
        for name, cxx in hook.names(compiler.kind)
    }
    info = compiler.to_json() if libs_from is None else {**compiler.to_json(), "useLibsFrom": libs_from}
    extra = {} if libs_from is None else {"useLibsFrom": libs_from}
    return mk_derivation(
        config,
        {
            "pname": f"{compiler.kind}-wrapper",
            "version": compiler.version,
            "stdenvCc": None,
            "driverLibDir": None,  # no GPU code: the driver dir is no input
            "hostCompiler": compiler.to_json(),
            **extra,
            "wrapperScripts": scripts,
            "ccWrapperInfo": json.dumps(info, sort_keys=True),
            "dontConfigure": True,
            "dontBuild": True,
            "dontFixup": True,
            "installPhase": INSTALL,
            "meta": {"description": f"{compiler.describe()} wrapped to add run paths of linked store libraries"
                                    + ("" if libs_from is None else
                                       f", linking the C++ runtime of {libs_from.get('kind')} {libs_from.get('major')}")},
        },
        system=system,
        name="stdenv.cc",
    )


@functools.cache
def _cached(config: Any, system: str, compiler: host_compiler.Compiler, libs_from: str | None) -> Any:
    return cc_wrapper(config, system, compiler, None if libs_from is None else json.loads(libs_from))


def cc_wrapper_for(config: Any, system: str, recorded: dict[str, Any] | None = None) -> Any:
    """stdenv.cc for a build: the compiler nvcc recorded (`recorded`, a hostCompiler attribute, with
    its ``useLibsFrom`` when backendCC is not the default compiler: `host_compiler.derivation_attrs`) or
    the host's default compiler; None when the host has no C compiler (a build that compiles fails then)."""
    libs_from = None
    if recorded and "error" not in recorded:
        compiler = host_compiler.Compiler(
            recorded["kind"], int(recorded["major"]), recorded["version"], recorded["cc"], recorded["cxx"]
        )
        if recorded.get("useLibsFrom"):
            libs_from = json.dumps(dict(recorded["useLibsFrom"]), sort_keys=True)
    else:
        compiler = host_compiler.default_compiler()
    if compiler is None:
        return None
    return _cached(config, system, compiler, libs_from)


def default_cc(final: AttrSet, config: Any, system: str) -> Any:
    """stdenv.cc of a package: the cc-wrapper of the compiler a nativeBuildInputs' nvcc was set up
    with (its `hostCompiler` attribute), else of the host's default compiler; None without one."""
    recorded = None
    for item in force(final.nativeBuildInputs) or ():
        item = force(item)
        owner = item.package if hasattr(item, "package") else getattr(item, "owner", item)
        if isinstance(owner, (Package, AttrSet)) and "pname" in owner and owner["pname"] == "cuda_nvcc":
            recorded = force(owner.derivation).attrs.get("hostCompiler")
            break
    return cc_wrapper_for(config, system, recorded)
