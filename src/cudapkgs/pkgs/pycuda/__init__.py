"""pycuda: Python bindings for the CUDA driver API, from its PyPI sdist, built against a set."""

from .package import PYCUDA_HASH, PYCUDA_VERSION, pycuda

__all__ = ["PYCUDA_HASH", "PYCUDA_VERSION", "pycuda"]
