"""zlib 1.3.1 from its pinned GitHub archive (madler/zlib v1.3.1), built with the host compiler.

Outputs as Nixpkgs' zlib (pkgs/development/libraries/zlib/default.nix): ``out``
(the shared library), ``dev`` (headers, zlib.pc) and ``static`` (libz.a).  The
archive is ``zlib-1.3.1.tar.gz`` of ``shared/sources`` (its NAR hash
``sha256-TkPLWSN5QcPlL9D0kc/yhH0/puE9bFND24aj5NVDKYs=`` is Nixpkgs'
fetchFromGitHub hash for that tag; see shared/sources/INDEX.md). cudapkgs ships that
archive (``cudapkgs/data/sources/zlib-1.3.1.tar.gz``, the built-in source mirror,
`cudapkgs.fetch.fixed_output.SHIPPED_SOURCES`), so the ML closure (scipy's libgfortran
needs libz) builds on a machine that reaches only PyPI; its tree is checked against the
same NAR hash as GitHub's would be.

zlib is compiled with the host's C compiler (``cc`` on the build's PATH), but unlike the other
source builds its store path does not name that compiler (no ``stdenvCc``): it is the one
library the ML closure builds from source (cuDNN, numpy's and pillow's wheels, triton need
``libz.so.1``), and a compiler's identity in its path would give every one of those packages
another store path on a machine with another gcc, so a teammate's machine could substitute
none of them from the team's cache (docs/binary-caches.md, "Another host compiler"). What its
consumers depend on is zlib's ABI (``libz.so.1``, ``zlib.h`` of 1.3.1), which any GCC or Clang
gives; the compiler that built an output is recorded in ``$dev/nix-support/cc-version``. A
deviation from Nixpkgs, whose zlib is built by the store's own compiler (the same on every
machine); a pinned compiler (one from PyPI) would make the bytes the same too.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["zlib"]

VERSION = "1.3.1"
NAR_HASH = "sha256-TkPLWSN5QcPlL9D0kc/yhH0/puE9bFND24aj5NVDKYs="


def zlib(config: Any, system: str, fetchFromGitHub: Any) -> Any:
    """The zlib package of a top level; its source is `fetchFromGitHub` madler/zlib v1.3.1 by NAR hash,
    so evaluating it needs no archive (fetching it does: a source mirror, see docs/architecture.md)."""
    from ...stdenv import mk_derivation

    return mk_derivation(
        config,
        lambda final: {
            "pname": "zlib",
            "version": VERSION,
            "src": fetchFromGitHub(owner="madler", repo="zlib", tag=f"v{VERSION}", hash=NAR_HASH),
            "outputs": ["out", "dev", "static"],
            "enableParallelBuilding": True,
            # The host's C compiler, not named by the path (see the module's docstring).
            "stdenvCc": None,
            "compilerFromHost": "cc (else gcc, else clang) on the build's PATH, not part of the store path (zlib's ABI)",
            # cc, else gcc, else clang of the build's PATH (a host with only one of them builds too)
            "configurePhase": (
                'CC="$(command -v cc || command -v gcc || command -v clang)" || { echo "zlib: no C compiler (cc, gcc '
                'or clang) on PATH: $PATH" >&2; exit 1; }\n'
                'export CC\n'
                './configure --prefix="$out" --includedir="$dev/include" --libdir="$out/lib"'
            ),
            "postInstall": (
                'mkdir -p "$static/lib" "$dev/lib" "$dev/nix-support"\n'
                '"$(command -v cc || command -v gcc || command -v clang)" --version | head -n 1 > "$dev/nix-support/cc-version"\n'
                'mv "$out/lib/libz.a" "$static/lib/"\n'
                'mv "$out/lib/pkgconfig" "$dev/lib/"\n'
                'rm -rf "$out/share"\n'
            ),
            # The dev output propagates out (the shared library) and static, as multiple-outputs does.
            "propagatedBuildOutputs": ["out"],
            "meta": {
                "description": "Lossless data-compression library",
                "homepage": "https://zlib.net",
                "license": "zlib",
                "sourceHash": NAR_HASH,
            },
        },
        system=system,
        name="zlib",
    )
