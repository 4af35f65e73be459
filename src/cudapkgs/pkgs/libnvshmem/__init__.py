"""libnvshmem: a from-source member of every CUDA set (see package.py)."""

from .package import libnvshmem

__all__ = ["libnvshmem"]
