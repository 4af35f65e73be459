"""cuda-modules/aliases.nix: old names of set members, kept while allowAliases is true."""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..lib.fixpoint import AttrSet, lazy

# cuda-modules/aliases.nix@c10e8fecb9071c4d786f84d2ee04a11122476e36: old name -> (new path, attribute)
ALIASES: dict[str, tuple[str, str]] = {
    "cudaFlags": ("cudaPackages.flags", "flags"),
    "cudaVersion": ("cudaPackages.cudaMajorMinorVersion", "cudaMajorMinorVersion"),
    "cudatoolkit-legacy-runfile": ("cudaPackages.cudatoolkit", "cudatoolkit"),
    "cusparselt": ("cudaPackages.libcusparse_lt", "libcusparse_lt"),
}


class CudaAliasWarning(UserWarning):
    """A deprecated in-set alias was read (Nixpkgs' `lib.warn` in aliases.nix)."""


def _aliases(final: AttrSet, prev: AttrSet) -> dict[str, Any]:
    """cuda-modules/aliases.nix: old names kept when allowAliases is true; reading one warns
    "cudaPackages.<old> is deprecated, use <new> instead" (once per set and name)."""
    import warnings

    def alias(old: str, path: str, attr: str) -> Any:
        def value() -> Any:
            warnings.warn(f"cudaPackages.{old} is deprecated, use {path} instead", CudaAliasWarning, stacklevel=2)
            return final[attr]

        return lazy(value)

    return {old: alias(old, path, attr) for old, (path, attr) in ALIASES.items()}
