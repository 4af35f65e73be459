"""The make builder: stdenv's default build, check and install phases.

Nixpkgs: pkgs/stdenv/generic/setup.sh (buildPhase, installPhase).  ``makeFlags``
go to every make call, ``buildFlags`` to the build and ``installFlags`` /
``installTargets`` (default ``install``) to the install; ``-j$NIX_BUILD_CORES``
only with ``enableParallelBuilding`` (Nixpkgs' default for mkDerivation is off;
the cmake builder turns it on).  ``makefile`` names another makefile.
"""

from __future__ import annotations

__all__ = ["BUILD", "INSTALL"]

_MAKEFILE = '[ -n "${makefile:-}" ] || [ -e Makefile ] || [ -e makefile ] || [ -e GNUmakefile ]'
_FLAGS = (
    '${makefile:+-f "$makefile"} '
    '${enableParallelBuilding:+-j"$NIX_BUILD_CORES" -l"$NIX_BUILD_CORES"} '
    '"${makeFlags[@]}"'
)
BUILD = f'if {_MAKEFILE}; then make {_FLAGS} "${{buildFlags[@]}}"; else echo "no Makefile, doing nothing"; fi'
INSTALL = (
    f'if {_MAKEFILE}; then '
    'if [ ${#installTargets[@]} -eq 0 ]; then installTargets=(install); fi; '
    f'make {_FLAGS} "${{installFlags[@]}}" "${{installTargets[@]}}"; fi'
)
