"""libmathdx: the library that integrates cuBLASDx and cuFFTDx into Warp, Nixpkgs' `cudaPackages.libmathdx`.

Follows pkgs/development/cuda-modules/packages/libmathdx.nix@7ca5c1cad759034d0c157203171cbe3c2f0024fa:
version 0.1.2, `fetchzip` of NVIDIA's cublasdx redist
``libmathdx-Linux-<cpu>-0.1.2.tar.gz`` with Nixpkgs' per-system hash (no source elsewhere:
`src` is null and the package unavailable), outputs out and static
(lib/libmathdx_static.a), no `cudaNamePrefix` (it does not depend on the set), the NVIDIA Math
Libraries EULA (unfree), aarch64-linux and x86_64-linux. NVIDIA's server is not reachable from
these machines: it evaluates; building needs the archive (or a source mirror holding it).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...lib.fixpoint import lazy
from ...meta import source_meta
from ...stdenv import mk_derivation

VERSION = "0.1.2"
BASE_URL = "https://developer.download.nvidia.com/compute/cublasdx/redist/cublasdx"
HASHES = {
    "aarch64-linux": "sha256-CTf1Unt+QBYZ+OsypQU0ppf4ucsEaFMaro9srvlnt1Y=",
    "x86_64-linux": "sha256-wD23ppuVCDUkmPVpZPoHa/miYGTF22YUiO8wCBqj1OY=",
}
CPU = {"aarch64-linux": "aarch64", "x86_64-linux": "x86_64"}
PRE_INSTALL = """\
mkdir -p "$out" "$static/lib"
cp -a . "$out"/
mv "$out/lib/libmathdx_static.a" "$static/lib/"
"""


def math_eula() -> Any:
    """libmathdx.nix's license record: the NVIDIA Math Libraries EULA, not free."""
    from ...licenses import License

    return License("NVIDIA Math Libraries EULA",
                   "LICENSE AGREEMENT FOR NVIDIA MATH LIBRARIES SOFTWARE DEVELOPMENT KITS",
                   free=False, redistributable=False)


def libmathdx(backendStdenv: Any, fetchzip: Any, config: Any) -> Any:
    """The libmathdx package of a CUDA set."""
    system = backendStdenv.hostNixSystem

    def attrs(final: Any) -> dict[str, Any]:
        def src() -> Any:
            if system not in HASHES:
                return None
            name = "-".join([final.pname, "Linux", CPU[system], final.version])
            return fetchzip(name=name, url=f"{BASE_URL}/{name}.tar.gz", hash=HASHES[system])

        return {
            "pname": "libmathdx",
            "version": VERSION,
            "src": lazy(src),
            "outputs": ["out", "static"],
            "stdenvCc": None,  # NVIDIA's binaries moved into place: nothing is compiled (no host compiler in the path)
            "dontConfigure": True,
            "dontBuild": True,
            "installPhase": PRE_INSTALL,
            "doCheck": False,
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "A library used to integrate cuBLASDx and cuFFTDx into Warp",
                "homepage": "https://developer.nvidia.com/cublasdx-downloads",
                "license": math_eula(),
                "platforms": ["aarch64-linux", "x86_64-linux"],
            })),
        }

    return mk_derivation(config, attrs, system=system, name="libmathdx")
