"""CMake packages in a user file: `cudapkgs build -f examples/cmake_examples.py NAME`.

    cudapkgs build -f examples/cmake_examples.py cmake_hello                 # a C project, no CUDA
    cudapkgs build -f examples/cmake_examples.py cmake_cuda_example \\
        --set cudaSupport=true --set allowUnfree=true --arg cudaPackages=cudaPackages_13_0

`cmake` (and `ninja`) in nativeBuildInputs bring the cmake builder: configure with
`cmakeFlags`, build with Ninja, install one directory per output.  With cuda_nvcc there too,
setupCudaHook points FindCUDAToolkit at the set's split outputs (CUDAToolkit_ROOT,
CUDAToolkit_INCLUDE_DIR, CUDAHOSTCXX).
"""

from pathlib import Path

from cudapkgs.api import mk_derivation

HERE = Path(__file__).resolve().parent


def cmake_hello(config, cmake, ninja):
    """A C program built by the cmake builder."""
    return mk_derivation(config, {
        "pname": "cmake-hello", "version": "1.0",
        "src": HERE / "cmake-hello",
        "nativeBuildInputs": [cmake, ninja],
        "meta": {"mainProgram": "cmake-hello"},
    })


def cmake_cuda_example(config, cudaPackages, cmake, ninja):
    """find_package(CUDAToolkit) + enable_language(CUDA), CUDA::cublas and CUDA::cudart (cudapkgs' example)."""
    from cudapkgs.pkgs.cmake_cuda_example import cmake_cuda_example as example

    return example(cudaPackages=cudaPackages, cmake=cmake, ninja=ninja, config=config)
