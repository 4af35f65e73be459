"""nvbench: NVIDIA's CUDA kernel benchmarking library, Nixpkgs' `cudaPackages.nvbench`.

Follows pkgs/development/cuda-modules/packages/nvbench.nix@da17174ff7fc6b57827ec9094258d0eac10adc27:
version 0-unstable-2024-05-31, NVIDIA/nvbench rev a1715140 with Nixpkgs' hash, outputs out/dev/lib,
CMake with the header tests on and the GPU tests only when `doCheckGpu` (then
requiredSystemFeatures cuda), inputs cuda_cccl, cuda_cudart, cuda_cupti, cuda_nvml_dev and
rapids-cmake, `passthru.tests.withGpu` (doCheckGpu = true), broken below CUDA 11.4 or with
doCheckGpu without doCheck. rapids-cmake is no top-level package here ("rapids-cmake is
available" fails), and the source is not in the mirror: it evaluates; building needs both.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import lazy
from ...lib.versions import version_older
from ..from_source import (CMAKE_BUILD, CMAKE_CONFIGURE, CMAKE_INSTALL, cmake_bool, cmake_feature, present,
                           resolve_externals, source_package)

REV = "a171514056e5d6a7f52a035dd6c812fa301d4f4f"
HASH = "sha256-S8IVvJPUrPVmilw6ftqr+oia5uoVALmteBWORiASDBg="
VERSION = "0-unstable-2024-05-31"
EXTERNALS = ("cmake", "rapids-cmake")
IGNORED_TESTS = ("nvbench.test.cmake.test_export.build_tree", "nvbench.test.cmake.test_export.install_tree")


def nvbench(backendStdenv: Any, autoAddDriverRunpath: Any, cudaMajorMinorVersion: str, cuda_cccl: Any,
            cuda_cudart: Any, cuda_cupti: Any, cuda_nvcc: Any, cuda_nvml_dev: Any, fetchFromGitHub: Any,
            config: Any, top: Any) -> Any:
    """The nvbench package of a CUDA set."""
    externals = resolve_externals(top, EXTERNALS)

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "name": lazy(lambda: f"cuda{cudaMajorMinorVersion}-{final.pname}-{final.version}"),
            "outputs": ["out", "dev", "lib"],
            "nativeBuildInputs": present(autoAddDriverRunpath, cuda_nvcc, externals["cmake"], externals["rapids-cmake"]),
            "buildInputs": [cuda_cccl, cuda_cudart, cuda_cupti, cuda_nvml_dev],
            "doCheck": True,
            "doCheckGpu": False,
            "cmakeFlags": lazy(lambda: [
                cmake_bool("NVBench_ENABLE_TESTING", bool(final.doCheckGpu)),
                cmake_bool("NVBench_ENABLE_HEADER_TESTING", bool(final.doCheck)),
                cmake_bool("NVBench_ENABLE_DEVICE_TESTING", False),
                cmake_feature("CMAKE_CTEST_ARGUMENTS", ";".join(["-L", "CUDA", "-E", "'" + "|".join(IGNORED_TESTS) + "'"])),
            ]),
            "requiredSystemFeatures": lazy(lambda: ["cuda"] if final.doCheckGpu else []),
            "enableParallelBuilding": True,
            "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD, "installPhase": CMAKE_INSTALL,
        }

    def passthru(final: Any) -> dict[str, Any]:
        return {"tests": {"withGpu": lazy(lambda: package.override_attrs({"doCheckGpu": True}))}}

    def broken() -> list[dict[str, Any]]:
        return [{"message": "CUDA 11.4 or newer, and doCheck when doCheckGpu (nvbench.nix meta.broken)",
                 "assertion": not version_older(cudaMajorMinorVersion, "11.4")}]

    package = source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=f"cuda{cudaMajorMinorVersion}",
        pname="nvbench", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="nvbench", rev=REV, hash=HASH),
        meta={"description": "CUDA Kernel Benchmarking Library", "homepage": "https://github.com/NVIDIA/nvbench",
              "license": licenses.asl20},
        attrs=attrs, externals=externals, passthru=passthru, broken_assertions=broken,
    )
    return package
