"""The saxpy example: a CUDA program built by the store's nvcc, or its CPU fallback."""

from .package import saxpy

__all__ = ["saxpy"]
