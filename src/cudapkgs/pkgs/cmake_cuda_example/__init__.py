"""The CMake example: FindCUDAToolkit + enable_language(CUDA), CUDA::cublas and CUDA::cudart."""

from .package import cmake_cuda_example

__all__ = ["cmake_cuda_example"]
