"""CUDA package sets: definitions, backendStdenv, buildRedist and the `_cuda` fixed point."""
