"""`cudaPackages.tests`: the attribute of each ported test and the module that makes it.

Names are Nixpkgs' (pkgs/development/cuda-modules/packages/tests/<name>.nix); each module has a
function of the module's name taking (scope, config, system) and returning the test package (or
an attribute set of them). Loaded on first read, one module per test.
"""

from __future__ import annotations

import importlib
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...lib.fixpoint import AttrSet, lazy

# attribute -> (module, function)
_HERE = "cudapkgs.cuda.set_tests."
TESTS: dict[str, tuple[str, str]] = {
    "backend-headers": (_HERE + "backend_headers", "backend_headers"),
    "backend-stdenv": (_HERE + "backend_stdenv", "backend_stdenv"),
    "cmake": (_HERE + "cmake_suite", "cmake"),
    "component-hook": (_HERE + "component_hook", "component_hook"),
    "cuda-library-samples": (_HERE + "samples", "cuda_library_samples"),
    "cudart-pkg-config": (_HERE + "pkg_config", "cudart_pkg_config"),
    "cudatoolkit": (_HERE + "toolkit_tests", "cudatoolkit"),
    "cudnn-frontend": (_HERE + "samples", "cudnn_frontend"),
    "cutlass-cmake": (_HERE + "cmake_consumers", "cutlass_cmake"),
    "flags": (_HERE + "flags", "flags"),
    "libcudss-cmake": (_HERE + "cmake_consumers", "libcudss_cmake"),
    "nvcc-backend": (_HERE + "nvcc_backend", "nvcc_backend"),
    "nvcc-cmake": (_HERE + "cmake_consumers", "nvcc_cmake"),
    "nvcc-data-outputs": (_HERE + "nvcc_outputs", "nvcc_data_outputs"),
    "nvcc-discovery": (_HERE + "toolkit_tests", "nvcc_discovery"),
    "nvcc-fortify": (_HERE + "nvcc_fortify", "nvcc_fortify"),
    "nvcc-hook": (_HERE + "nvcc_hook", "nvcc_hook"),
    "nvcc-outputs": (_HERE + "nvcc_outputs", "nvcc_outputs"),
    "nvcc-roles": (_HERE + "nvcc_roles", "nvcc_roles"),
    "nvcc-runtime": (_HERE + "nvcc_runtime", "nvcc_runtime"),
    "nvshmem-cmake": (_HERE + "cmake_consumers", "nvshmem_cmake"),
    "onnx-tensorrt": (_HERE + "onnx_tensorrt", "onnx_tensorrt"),
    "opencv-and-torch": (_HERE + "opencv_and_torch", "opencv_and_torch"),
    "pkg-config": (_HERE + "pkg_config", "pkg_config"),
    "public-headers": (_HERE + "public_headers", "public_headers_set"),
    "redist-outputs": (_HERE + "redist_outputs", "redist_outputs"),
    "redist-runtime": (_HERE + "redist_runtime", "redist_runtime"),
    "redist-variants": (_HERE + "redist_variants", "redist_variants"),
    "redists-installed": ("cudapkgs.cuda.aggregates", "redists_installed"),
    "redists-unpacked": ("cudapkgs.cuda.aggregates", "redists_unpacked"),
    "scope": (_HERE + "scope", "scope"),
}
# public-headers.nix is a function packages call (passthru.tests.headers); `public-headers` here
# gathers those at set level.


def tests(scope: Any, config: Any, system: str) -> AttrSet:
    """The set's `tests` attribute: every entry of `TESTS`, lazily."""

    def make(module: str, function: str) -> Any:
        return getattr(importlib.import_module(module), function)(scope, config, system)

    return AttrSet(
        {name: lazy(lambda m=m, f=f: make(m, f)) for name, (m, f) in TESTS.items()},
        name=f"{scope.attr_path}.tests",
    )
