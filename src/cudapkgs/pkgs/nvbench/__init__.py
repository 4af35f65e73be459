"""nvbench: a from-source member of every CUDA set (see package.py)."""

from .package import nvbench

__all__ = ["nvbench"]
