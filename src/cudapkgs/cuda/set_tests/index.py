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
    "component-hook": (_HERE + "component_hook", "component_hook"),
    "cuda-library-samples": (_HERE + "samples", "cuda_library_samples"),
    "cudart-pkg-config": (_HERE + "pkg_config", "cudart_pkg_config"),
    "cudatoolkit": (_HERE + "toolkit_tests", "cudatoolkit"),
    "cudnn-frontend": (_HERE + "samples", "cudnn_frontend"),
    "cutlass-cmake": (_HERE + "cmake_consumers", "cutlass_cmake"),
    "flags": (_HERE + "flags", "flags"),
    "libcudss-cmake": (_HERE + "cmake_consumers", "libcudss_cmake"),
    "nvcc-cmake": (_HERE + "cmake_consumers", "nvcc_cmake"),
    "nvcc-discovery": (_HERE + "toolkit_tests", "nvcc_discovery"),
    "nvcc-hook": (_HERE + "nvcc_hook", "nvcc_hook"),
    "nvcc-runtime": (_HERE + "nvcc_runtime", "nvcc_runtime"),
    "nvshmem-cmake": (_HERE + "cmake_consumers", "nvshmem_cmake"),
    "pkg-config": (_HERE + "pkg_config", "pkg_config"),
    "redist-variants": (_HERE + "redist_variants", "redist_variants"),
    "redists-installed": ("cudapkgs.cuda.aggregates", "redists_installed"),
    "redists-unpacked": ("cudapkgs.cuda.aggregates", "redists_unpacked"),
    "scope": (_HERE + "scope", "scope"),
}
# public-headers.nix is no set test of its own: packages call it (passthru.tests.headers).


def tests(scope: Any, config: Any, system: str) -> AttrSet:
    """The set's `tests` attribute: every entry of `TESTS`, lazily."""

    def make(module: str, function: str) -> Any:
        return getattr(importlib.import_module(module), function)(scope, config, system)

    return AttrSet(
        {name: lazy(lambda m=m, f=f: make(m, f)) for name, (m, f) in TESTS.items()},
        name=f"{scope.attr_path}.tests",
    )
