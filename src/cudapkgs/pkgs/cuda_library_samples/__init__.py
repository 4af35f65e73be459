"""cuda_library_samples: a from-source member of every CUDA set (see package.py)."""

from .package import cuda_library_samples

__all__ = ["cuda_library_samples"]
