"""zlib, built from its pinned source archive."""

from .package import zlib

__all__ = ["zlib"]
