"""rdma-core's libraries (libibverbs, librdmacm, libmlx5), pinned Debian packages."""

from .package import rdma_core

__all__ = ["rdma_core"]
