"""cuda_samples: a from-source member of every CUDA set (see package.py)."""

from .package import cuda_samples

__all__ = ["cuda_samples"]
