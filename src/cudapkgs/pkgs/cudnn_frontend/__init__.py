"""cudnn_frontend: a from-source member of every CUDA set (see package.py)."""

from .package import cudnn_frontend

__all__ = ["cudnn_frontend"]
