"""cutlass: Nixpkgs' `cudaPackages.cutlass` (pkgs/development/cuda-modules/packages/cutlass.nix@371f570ea6cbbd2ef7c40bd7c24df2036431c5f1).

Version 3.9.2, NVIDIA/cutlass tag v3.9.2 with Nixpkgs' hash (its archive is not in the mirror:
it evaluates; building needs GitHub); CMake with `CUTLASS_NVCC_ARCHS` from the set's flags,
outputs out and dist (pythonSupport), the platform assertion that every capability is at least
7.0, Apache-2.0. Inputs the top level does not have (cmake, ninja, python3Packages) make it
broken with "<name> is available".
"""

from __future__ import annotations

import json
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import lazy
from ...lib.versions import version_at_least
from ..from_source import (CMAKE_BUILD, CMAKE_CONFIGURE, CMAKE_INSTALL, cmake_bool, cmake_feature, present,
                           resolve_externals, source_package)

VERSION = "3.9.2"
HASH = "sha256-teziPNA9csYvhkG5t2ht8W8x5+1YGGbHm8VKx4JoxgI="
EXTERNALS = ("cmake", "ninja", "python3Packages")


def cutlass(backendStdenv: Any, cuda_cudart: Any, cuda_nvcc: Any, cuda_nvrtc: Any, cudaNamePrefix: str,
            fetchFromGitHub: Any, flags: Any, libcurand: Any, config: Any, top: Any,
            pythonSupport: bool = True, enableF16C: bool = False, enableTools: bool = False) -> Any:
    """The cutlass package of a CUDA set."""
    from ...errors import EvalError

    if enableTools:
        raise EvalError("enableTools is not yet implemented")  # cutlass.nix: assertMsg (!enableTools)
    externals = resolve_externals(top, EXTERNALS)

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "outputs": ["out"] + (["dist"] if pythonSupport else []),
            "nativeBuildInputs": present(cuda_nvcc, externals["cmake"], externals["ninja"]),
            "buildInputs": [cuda_cudart, cuda_nvrtc, libcurand],
            "cmakeFlags": lazy(lambda: [
                cmake_feature("CUTLASS_NVCC_ARCHS", flags.cmakeCudaArchitecturesString),
                cmake_bool("CUTLASS_ENABLE_EXAMPLES", False),
                cmake_bool("CUTLASS_ENABLE_TESTS", False), cmake_bool("CUTLASS_ENABLE_GTEST_UNIT_TESTS", False),
                cmake_bool("CUTLASS_USE_SYSTEM_GOOGLETEST", True), cmake_bool("CUTLASS_ENABLE_TOOLS", enableTools),
                cmake_bool("CUTLASS_ENABLE_CUBLAS", enableTools), cmake_bool("CUTLASS_ENABLE_CUDNN", enableTools),
                cmake_bool("CUTLASS_ENABLE_F16C", enableF16C), cmake_bool("CUTLASS_UNITY_BUILD_ENABLED", False),
            ]),
            "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD, "installPhase": CMAKE_INSTALL,
            "enableParallelBuilding": True,
            "doCheck": False,
        }

    def platform_assertions() -> list[dict[str, Any]]:
        caps = list(flags.cudaCapabilities)
        return [{
            "message": f"all capabilities are >= 7.0 ({json.dumps(caps, separators=(',', ':'))})",
            "assertion": all(version_at_least(c, "7.0") for c in caps),
        }]

    return source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=cudaNamePrefix,
        pname="cutlass", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="cutlass", tag=f"v{VERSION}", hash=HASH),
        meta={"description": "CUDA Templates for Linear Algebra Subroutines",
              "homepage": "https://github.com/NVIDIA/cutlass", "license": licenses.asl20},
        attrs=attrs, externals=externals, platform_assertions=platform_assertions,
    )
