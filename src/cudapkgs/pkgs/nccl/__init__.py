"""NCCL: NVIDIA's collective communication library, built from source as a member of each CUDA set."""

from .package import nccl

__all__ = ["nccl"]
