"""tests/public-headers.nix: a package's public headers compile and its libraries link on their own.

Nixpkgs: pkgs/development/cuda-modules/packages/tests/public-headers.nix@613b8b48f7d48ff70985b390e366975eede57415.
The consumer includes every header, takes the address of every symbol and links every library,
with the package as its only build input, so the package must bring its public dependencies
(cuda_cudart for CUDA types) through propagation; neither nvcc nor other toolkit inputs mask an
omission. No GPU is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...build_inputs import get_dev
from ...stdenv import mk_derivation


def consumer_source(headers: Sequence[str], symbols: Sequence[str]) -> str:
    """consumer.cpp as public-headers.nix writes it: one #include per header, one volatile pointer
    per symbol, and a main that fails when any pointer is null."""
    lines = [f"#include <{h}>" for h in headers]
    lines += [f"auto * volatile symbol{i} = &{s};" for i, s in enumerate(symbols, 1)]
    checks = " || ".join(f"symbol{i} == nullptr" for i in range(1, len(symbols) + 1)) or "0"
    lines += ["int main() {", f"  return {checks};", "}"]
    return "\n".join(lines) + "\n"


def public_headers(cuda: Any, config: Any, package: Any, *, headers: Sequence[str], libraries: Sequence[str],
                   symbols: Sequence[str]) -> Any:
    """The `<package.name>-public-headers` test of `package` (a member of the set `cuda`; a package
    or its final attributes, as buildRedist's `finalAttrs.finalPackage`)."""
    links = " ".join(f"-l{lib}" for lib in libraries)
    return mk_derivation(
        config,
        {
            "name": f"{package.name}-public-headers",
            "strictDeps": True,
            "buildInputs": [get_dev(package)],  # a bare package in buildInputs: its dev output
            "consumerSource": consumer_source(headers, symbols),
            "dontUnpack": True,
            "dontConfigure": True,
            "buildPhase": 'printf "%s" "$consumerSource" > consumer.cpp\n'
                          f'"$CXX" -std=c++17 consumer.cpp {links} -o consumer\n',
            "installPhase": 'mkdir -p "$out/bin"\ncp consumer "$out/bin/"\ncp consumer.cpp "$out/"\n',
            "meta": {"description": f"{package.pname}'s public headers compile and its libraries link"},
        },
        system=cuda.backendStdenv.hostNixSystem,
        name=f"{cuda.attr_path}.{package.pname}.passthru.tests.headers",
    )


def public_headers_set(cuda: Any, config: Any, system: str) -> Any:
    """`tests.public-headers`: the `passthru.tests.headers` of every member whose component entry
    has a header test (`header_test` in data/redist_components.toml: libcusparse_lt, libcutensor,
    libcublasmp), gathered at set level so that `cudapkgs test <set>` runs them with the others."""
    from ...lib.fixpoint import AttrSet, lazy
    from ..components import component_specs

    names = [pname for specs in component_specs().values() for pname, spec in specs.items()
             if getattr(spec, "header_test", None) and pname in cuda]

    def headers(pname: str) -> Any:
        from .common import meta_of, run_command

        package = cuda[pname]
        unavailable = meta_of(package)  # a broken subject: the test says why instead of failing to evaluate
        if unavailable:
            return run_command(cuda, config, "public-headers", 'touch "$out"\n', {"meta": unavailable}, suffix=pname)
        return package.passthru["tests"]["headers"]

    return AttrSet({pname: lazy(lambda pname=pname: headers(pname)) for pname in names},
                   name=f"{cuda.attr_path}.tests.public-headers")
