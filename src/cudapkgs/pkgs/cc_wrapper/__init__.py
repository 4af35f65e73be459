"""stdenv.cc: the host's C/C++ compiler in a cc-wrapper (see `cudapkgs.hooks.cc_wrapper`)."""

from .package import cc_wrapper, cc_wrapper_for

__all__ = ["cc_wrapper", "cc_wrapper_for"]
