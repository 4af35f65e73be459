"""cudnn-frontend: Nixpkgs' `cudaPackages.cudnn-frontend`
(pkgs/development/cuda-modules/packages/cudnn-frontend/package.nix@342bcfe06818e9dd2a8a47fde0a2a06012fa65ff).

Version 1.9.0 (the newest Nixpkgs pins 1.29.0.dev66489137, whose source is not in the mirror),
NVIDIA/cudnn-frontend tag v1.9.0 with that revision's hash; CMake with FetchContent disconnected,
samples and tests built (`doCheck`), the vendored nlohmann_json replaced by Nixpkgs' by
substitution; outputs out, legacy_samples, samples, tests; MIT. Nixpkgs applies four patch files
of its own (0001…0004) that are not reproduced here: the build says so as a broken assertion,
as do inputs the top level does not have (cmake, ninja, nlohmann_json, catch2_3).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ..from_source import (CMAKE_BUILD, CMAKE_CONFIGURE, CMAKE_INSTALL, cmake_bool, cmake_feature, present,
                           resolve_externals, source_package)
from ..substitute import SUBSTITUTE_IN_PLACE

VERSION = "1.9.0"
HASH = "sha256-Vc5jqB1XHcJEdKG0nxbWLewW2fDezRVwjUSzPDubSGE="
EXTERNALS = ("cmake", "ninja", "nlohmann_json", "catch2_3")
NIXPKGS_PATCHES = (
    "0001-cmake-float-out-common-python-bindings-option.patch",
    "0002-cmake-add-config-so-headers-can-be-discovered-when-i.patch",
    "0003-cmake-install-samples-and-tests-when-built.patch",
    "0004-samples-fix-instances-of-maybe-uninitialized.patch",
)


def cudnn_frontend(backendStdenv: Any, cccl: Any, cuda_cudart: Any, cuda_nvcc: Any, cuda_nvrtc: Any,
                   cudaNamePrefix: str, cudnn: Any, fetchFromGitHub: Any, libcublas: Any, config: Any,
                   top: Any) -> Any:
    """The cudnn-frontend package of a CUDA set."""
    externals = resolve_externals(top, EXTERNALS)
    do_check = True

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "outputs": ["out"] + (["legacy_samples", "samples", "tests"] if do_check else []),
            "nativeBuildInputs": present(externals["cmake"], cuda_nvcc, externals["ninja"]),
            "buildInputs": [cccl, cuda_cudart] + ([cudnn, cuda_nvrtc, libcublas] if do_check else [])
            + present(externals["catch2_3"]),
            "propagatedBuildInputs": present(externals["nlohmann_json"]),
            "postPatch": SUBSTITUTE_IN_PLACE
            + "rm -rfv include/cudnn_frontend/thirdparty/nlohmann\nrmdir -v include/cudnn_frontend/thirdparty\n"
            "substituteInPlace include/cudnn_frontend_utils.h --replace-fail "
            "'#include \"cudnn_frontend/thirdparty/nlohmann/json.hpp\"' '#include <nlohmann/json.hpp>'\n",
            "cmakeFlags": [
                cmake_bool("FETCHCONTENT_FULLY_DISCONNECTED", True),
                cmake_feature("FETCHCONTENT_TRY_FIND_PACKAGE_MODE", "ALWAYS"),
                cmake_bool("CUDNN_FRONTEND_BUILD_SAMPLES", do_check),
                cmake_bool("CUDNN_FRONTEND_BUILD_TESTS", do_check),
                cmake_bool("CUDNN_FRONTEND_BUILD_PYTHON_BINDINGS", False),
            ],
            "doCheck": do_check,
            "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD, "installPhase": CMAKE_INSTALL,
            "autoAddDriverRunpath": True,
            "enableParallelBuilding": True,
        }

    return source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=cudaNamePrefix,
        pname="cudnn-frontend", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="cudnn-frontend", tag=f"v{VERSION}", hash=HASH),
        meta={"description": "A c++ wrapper for the cudnn backend API",
              "homepage": "https://github.com/NVIDIA/cudnn-frontend", "license": licenses.mit},
        attrs=attrs, externals=externals,
        broken_assertions=lambda: [{"message": f"Nixpkgs' patch {p} is available", "assertion": False}
                                   for p in NIXPKGS_PATCHES],
    )
