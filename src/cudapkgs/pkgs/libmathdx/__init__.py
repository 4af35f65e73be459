"""libmathdx: a from-source member of every CUDA set (see package.py)."""

from .package import libmathdx

__all__ = ["libmathdx"]
