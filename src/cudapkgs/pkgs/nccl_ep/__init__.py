"""nccl_ep: a from-source member of every CUDA set (see package.py)."""

from .package import nccl_ep

__all__ = ["nccl_ep"]
