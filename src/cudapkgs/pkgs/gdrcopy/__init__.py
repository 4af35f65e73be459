"""gdrcopy: a from-source member of every CUDA set (see package.py)."""

from .package import gdrcopy

__all__ = ["gdrcopy"]
