"""cmake-cuda-example: a CMake project of cudapkgs' own built against a CUDA set.

``src/CMakeLists.txt`` uses ``find_package(CUDAToolkit)`` and ``project(… CUDA)``
and builds two programs: ``saxpy-cudart`` (a kernel of its own, CUDA::cudart)
and ``cublas-check`` (cublasSgemm + cublasSaxpy, CUDA::cublas).  Each checks
its GPU result against the CPU and exits 0 (PASS), 1 (wrong) or 2 (no GPU).
The set's cuda_nvcc, cuda_cudart and libcublas come in through
nativeBuildInputs/buildInputs; setupCudaHook points FindCUDAToolkit at the
split outputs, and the cmake builder passes the set's
``flags.cmakeCudaArchitecturesString``.  nvcc is scrubbed from the outputs
(removeReferencesTo), so the run-time closure is the programs, cudart's and
cuBLAS's lib outputs (and what cuBLAS needs at run time).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from ...stdenv import DerivationPackage, mk_derivation

SOURCE = os.path.join(os.path.dirname(__file__), "src")  # a local source (pathlib: `_source`)


def _source() -> Any:
    from pathlib import Path

    return Path(SOURCE)


def cmake_cuda_example(cudaPackages: Any, cmake: Any, ninja: Any, config: Any, system: str | None = None) -> DerivationPackage:
    """The example of a top level (callPackage'd): built with `cudaPackages` (default: the top level's)."""

    def attrs(final: AttrSet) -> dict[str, Any]:
        return {
            "pname": "cmake-cuda-example",
            "version": "1.0",
            "src": lazy(_source),  # a Path, as before; pathlib imported when it is read
            "nativeBuildInputs": [cmake, ninja, cudaPackages.cuda_nvcc],
            "buildInputs": [cudaPackages.cuda_cudart, cudaPackages.libcublas],
            "cmakeCudaArchitectures": cudaPackages.flags.cmakeCudaArchitecturesString,
            "autoAddDriverRunpath": True,
            "removeReferencesTo": [cudaPackages.cuda_nvcc],
            "meta": {
                "description": "FindCUDAToolkit example: a saxpy kernel (CUDA::cudart) and cuBLAS (CUDA::cublas), "
                "checked against the CPU",
                "mainProgram": "cublas-check",
            },
        }

    return mk_derivation(config, attrs, system=system, name="cmake-cuda-example")
