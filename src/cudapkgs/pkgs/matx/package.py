"""MatX: Nixpkgs' `cudaPackages.matx` (pkgs/development/cuda-modules/packages/matx.nix@c0a68d7659b50f25fcccc04515674acfc9d7cddc).

Version 0.8.0 from NVIDIA/MatX `refs/tags/v0.8.0` with Nixpkgs' hash; a CMake build with
rapids-cmake (the vendored copy removed), pybind11/numpy/cupy propagated, cuTENSOR and
cutensorNet (cuquantum) enabled. Nixpkgs' `name` here is `cuda<X.Y>-MatX-<version>` and its
meta is broken below CUDA 11.4. Inputs the top level does not have yet (cmake, rapids-cmake,
python3Packages, cuquantum, …) make it broken with "<name> is available".
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import lazy
from ...lib.versions import version_older
from ..from_source import CMAKE_BUILD, CMAKE_CONFIGURE, CMAKE_INSTALL, cmake_bool, present, source_package
from ..substitute import SUBSTITUTE_IN_PLACE

VERSION = "0.8.0"
HASH = "sha256-7ygdfo27tXz0f6jz6RwDCGwSQun3HqZJ9o6w2vKGM3s="
EXTERNALS = ("cmake", "ninja", "rapids-cmake", "python3Packages", "which", "cuquantum")


def matx(backendStdenv: Any, cccl: Any, cuda_cudart: Any, cuda_nvcc: Any, cudaMajorMinorVersion: str,
         cutlass: Any, libcutensor: Any, fetchFromGitHub: Any, flags: Any, config: Any, top: Any) -> Any:
    """The MatX package of a CUDA set."""
    from ..from_source import resolve_externals

    externals = resolve_externals(top, EXTERNALS)

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "name": lazy(lambda: f"cuda{cudaMajorMinorVersion}-{final.pname}-{final.version}"),
            "nativeBuildInputs": present(externals["cmake"], externals["ninja"], cuda_nvcc),
            "buildInputs": present(cuda_cudart, cccl, libcutensor, cutlass, externals["cuquantum"]),
            "postPatch": SUBSTITUTE_IN_PLACE + "rm -rf cmake/rapids-cmake\n"
            "substituteInPlace CMakeLists.txt --replace-fail 'include(cmake/GetPyBind11.cmake)' ''\n",
            "cmakeFlags": [
                cmake_bool("MATX_BUILD_EXAMPLES", False), cmake_bool("MATX_BUILD_TESTS", False),
                cmake_bool("MATX_BUILD_BENCHMARKS", False), cmake_bool("MATX_NVTX_FLAGS", True),
                cmake_bool("MATX_BUILD_DOCS", False), cmake_bool("MATX_BUILD_32_BIT", False),
                cmake_bool("MATX_MULTI_GPU", False), cmake_bool("MATX_EN_VISUALIZATION", False),
                cmake_bool("MATX_EN_CUTLASS", False), cmake_bool("MATX_EN_CUTENSOR", True),
                cmake_bool("MATX_EN_FILEIO", True), cmake_bool("MATX_EN_NVPL", False),
                cmake_bool("MATX_DISABLE_CUB_CACHE", True),
            ],
            "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD, "installPhase": CMAKE_INSTALL,
            "enableParallelBuilding": True,
        }

    return source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=f"cuda{cudaMajorMinorVersion}",
        pname="MatX", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="MatX", rev=f"refs/tags/v{VERSION}", hash=HASH),
        meta={"description": "An efficient C++17 GPU numerical computing library with Python-like syntax",
              "homepage": "https://nvidia.github.io/MatX", "license": licenses.bsd3},
        attrs=attrs, externals=externals,
        broken_assertions=lambda: [{"message": "CUDA 11.4 or newer (meta.broken = cudaOlder \"11.4\")",
                                    "assertion": not version_older(cudaMajorMinorVersion, "11.4")}],
    )
