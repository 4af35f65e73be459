"""matx: a from-source member of every CUDA set (see package.py)."""

from .package import matx

__all__ = ["matx"]
