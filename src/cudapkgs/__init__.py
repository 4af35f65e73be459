"""cudapkgs: Nixpkgs' CUDA package sets as a Python library.

    >>> import cudapkgs
    >>> pkgs = cudapkgs.import_pkgs(config={"cudaCapabilities": ["8.9"]}, system="x86_64-linux")
    >>> pkgs.cudaPackages_12_8.flags.gencode
    ['-gencode=arch=compute_89,code=sm_89', '-gencode=arch=compute_89,code=compute_89']

Imports are lazy so that `cudapkgs eval` starts fast.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
__version__ = "0.1.0"

__all__ = ["import_pkgs", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

    from .top_level import import_pkgs


def __getattr__(name: str) -> Any:
    if name == "import_pkgs":
        from .top_level import import_pkgs

        return import_pkgs
    raise AttributeError(f"module 'cudapkgs' has no attribute {name!r}")
