"""nvbandwidth: a from-source member of every CUDA set (see package.py)."""

from .package import nvbandwidth

__all__ = ["nvbandwidth"]
