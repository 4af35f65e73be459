"""nccl-tests: NCCL's performance and correctness tests, built against the set's NCCL."""

from .package import nccl_tests

__all__ = ["nccl_tests"]
