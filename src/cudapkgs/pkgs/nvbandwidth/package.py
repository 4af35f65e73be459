"""nvbandwidth: bandwidth measurements on NVIDIA GPUs, Nixpkgs' `cudaPackages.nvbandwidth`.

Follows pkgs/development/cuda-modules/packages/nvbandwidth/package.nix@9d2d944d7673738a492101ff62e07af3d691352e:
version 0.10.0, NVIDIA/nvbandwidth tag v0.10.0 with Nixpkgs' hash, CMake with
`CMAKE_CUDA_ARCHITECTURES = flags.cmakeCudaArchitecturesString`, inputs cuda_cudart, cuda_nvml_dev
and argparse, `bin/nvbandwidth` installed, broken without cudaSupport, and `passthru.gpuCheck`
(requiredSystemFeatures cuda; Nixpkgs marks it broken: hwloc fails in its sandbox). Not here:
Nixpkgs' use-cuda-imported-targets.patch (its text was not retrieved) and `argparse` (no such
package at the top level: "argparse is available" fails). The source is not in the mirror, so
it evaluates; building needs GitHub.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import lazy
from ..from_source import CMAKE_BUILD, CMAKE_CONFIGURE, cmake_feature, present, resolve_externals, source_package

VERSION = "0.10.0"
HASH = "sha256-bmE9EEe4mPzgo2QQucs+gof/NYN0rkvV/4ZxPWP1mMs="
EXTERNALS = ("cmake", "argparse")
INSTALL = 'install -Dm755 build/nvbandwidth -t "$out/bin"\n'


def nvbandwidth(backendStdenv: Any, cudaNamePrefix: str, cuda_cudart: Any, cuda_nvcc: Any, cuda_nvml_dev: Any,
                fetchFromGitHub: Any, flags: Any, config: Any, top: Any, cudaSupport: bool | None = None) -> Any:
    """The nvbandwidth package of a CUDA set."""
    cuda_support = config.cudaSupport if cudaSupport is None else cudaSupport
    externals = resolve_externals(top, EXTERNALS)

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "name": lazy(lambda: f"{final.pname}-{final.version}"),  # nvbandwidth.nix names it without the prefix
            "nativeBuildInputs": present(externals["cmake"], cuda_nvcc),
            "buildInputs": present(externals["argparse"], cuda_cudart, cuda_nvml_dev),
            "cmakeFlags": lazy(lambda: [cmake_feature("CMAKE_CUDA_ARCHITECTURES", flags.cmakeCudaArchitecturesString)]),
            "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD, "installPhase": INSTALL,
        }

    def passthru(final: Any) -> dict[str, Any]:
        return {"gpuCheck": lazy(lambda: package.override_attrs(lambda prev: {
            "requiredSystemFeatures": ["cuda"],
            "postInstall": '"$out/bin/nvbandwidth"\n',
            "passthru": {"brokenAssertions": [{"message": "hwloc finds the sysfs CPU topology (it does not in "
                                                          "Nixpkgs' sandbox)", "assertion": False}]},
        }))}

    package = source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=cudaNamePrefix,
        pname="nvbandwidth", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="nvbandwidth", tag=f"v{VERSION}", hash=HASH),
        meta={"description": "Tool for bandwidth measurements on NVIDIA GPUs",
              "homepage": "https://github.com/NVIDIA/nvbandwidth", "license": licenses.asl20,
              "mainProgram": "nvbandwidth", "platforms": ["aarch64-linux", "x86_64-linux"]},
        attrs=attrs, externals=externals, passthru=passthru,
        broken_assertions=lambda: [{"message": "cudaSupport is enabled (meta.broken = !cudaSupport)",
                                    "assertion": bool(cuda_support)}],
    )
    return package
