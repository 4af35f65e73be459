"""cutlass: a from-source member of every CUDA set (see package.py)."""

from .package import cutlass

__all__ = ["cutlass"]
