"""nccl: Nixpkgs' `cudaPackages.nccl`, built from NVIDIA's source with the set's nvcc.

Follows pkgs/development/cuda-modules/packages/nccl.nix@0145c6da2896513d94440e7fb41c11487aa3de16:
version by CUDA release (2.30.7-1 from CUDA 12.0; 2.28.7-1 from 11.7; 2.26.6-1 from 11.6;
else 2.25.1-1), `fetchFromGitHub` NVIDIA/nccl tag `v<version>` with Nixpkgs' hash, outputs
out/dev/static, make with `NVCC_GENCODE = flags.gencodeString`, NVIDIA's `-ccbin $(CXX)`
removed from makefiles/common.mk by substitution, nvcc's path scrubbed from the library
(`disallowedReferences`), and the platform assertion that pre-Thor Jetsons are not supported.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import AttrSet, lazy
from ...stdenv import DerivationPackage, mk_derivation
from ...lib.versions import version_at_least, version_older
from ...meta import source_meta
from ..substitute import SUBSTITUTE_IN_PLACE

# Nixpkgs' fetchFromGitHub hashes (NAR SHA-256 of the unpacked tag), nccl.nix@0145c6da.
HASHES = {
    "2.30.7-1": "sha256-fdiQZweX0jYfGroP0bL5Sfv3+DkCzVBZZLEbPv8aqq8=",
    "2.28.7-1": "sha256-NM19OiBBGmv3cGoVoRLKSh9Y59hiDoei9NIrRnTqWeA=",
    "2.26.6-1": "sha256-vkWMGXCy+dIpYCecdafmOAGlnfRxIQ5Y2ZQuMjinraI=",
    "2.25.1-1": "sha256-3snh0xdL9I5BYqdbqdl+noizJoI38mZRVOJChgEE1I8=",
}
PLATFORMS = ["aarch64-linux", "x86_64-linux"]


def nccl_version(cuda_major_minor: str) -> str:
    """NCCL's version for a CUDA release (nccl.nix@0145c6da)."""
    for bound, version in (("12.0", "2.30.7-1"), ("11.7", "2.28.7-1"), ("11.6", "2.26.6-1")):
        if version_at_least(cuda_major_minor, bound):
            return version
    return "2.25.1-1"


def wheel_cudart_fallback(cuda_cudart: Any) -> str:
    """Shell text: link NCCL against libcudart.so when cuda_cudart has no static library.

    cuda_cudart: the set's cuda_cudart (its `static` and `lib` outputs are read at build time).
    Returns a `postPatch` fragment that leaves NCCL's Makefile alone when
    `${static}/lib/libcudart_static.a` exists (Nixpkgs' case, nccl.nix@0145c6da passes no
    CUDARTLIB) and otherwise substitutes `CUDARTLIB ?= cudart_static` by `cudart` in
    src/Makefile (NVIDIA/nccl v2.30.7-1), saying so in the build log; `--replace-fail` makes an
    upstream change of that line fail the build rather than be skipped.
    """
    static, lib = cuda_cudart.static, cuda_cudart.lib
    return (
        f'if [ ! -e "{static}/lib/libcudart_static.a" ]; then\n'
        f'  echo "nccl: {static} has no lib/libcudart_static.a (cuda_cudart came from NVIDIA\'s wheel):'
        f' linking libcudart.so from {lib}/lib"\n'
        "  substituteInPlace ./src/Makefile --replace-fail 'CUDARTLIB  ?= cudart_static' 'CUDARTLIB  ?= cudart'\n"
        "fi\n"
    )


def nccl(
    backendStdenv: Any,
    cccl: Any,
    cuda_cudart: Any,
    cuda_nvcc: Any,
    cudaMajorMinorVersion: str,
    cudaNamePrefix: str,
    fetchFromGitHub: Any,
    flags: Any,
    config: Any,
    system: str | None = None,
) -> DerivationPackage:
    """The NCCL package of a CUDA set (callPackage'd inside the set's scope)."""
    system = system or backendStdenv.hostNixSystem

    def attrs(final: AttrSet) -> dict[str, Any]:
        version = nccl_version(cudaMajorMinorVersion)

        def post_patch() -> str:
            text = SUBSTITUTE_IN_PLACE + (
                "substituteInPlace ./makefiles/common.mk --replace-fail '-ccbin $(CXX)' ''\n"
            )
            if version_older(version, "2.27.3-1"):
                text += "substituteInPlace ./makefiles/common.mk --replace-fail '-std=c++11' '$(CXXSTD)'\n"
            # Not in nccl.nix: NCCL links cudart statically (src/Makefile `CUDARTLIB ?= cudart_static`),
            # which Nixpkgs finds in cuda_cudart's `static` output. CUDA 13's cudart wheel
            # (nvidia-cuda-runtime 13.0.96) has libcudart_static.a, so a wheel-only 13.x set builds
            # exactly as Nixpkgs does (measured: docs/nccl-h200.md). CUDA 12's wheel
            # (nvidia-cuda-runtime-cu12) has none, leaving `static` empty (realise/redist.py,
            # "missing-from-wheel"); only then does NCCL link libcudart.so (kept in the run path,
            # hence in the closure) instead of failing to link. Decided at build time from what
            # the realised cudart holds, so the derivation is the same whichever source it came from.
            text += wheel_cudart_fallback(cuda_cudart)
            return text

        def platform_assertions() -> list[dict[str, Any]]:
            jetson = list(backendStdenv.requestedJetsonCudaCapabilities)
            return [
                {
                    "message": "Pre-Thor Jetson devices (CUDA capabilities < 10.1) are not supported by NCCL",
                    "assertion": not backendStdenv.hasJetsonCudaCapability
                    or all(version_at_least(c, "10.1") for c in jetson),
                }
            ]

        return {
            "pname": "nccl",
            "version": version,
            "name": lazy(lambda: f"{cudaNamePrefix}-{final.pname}-{final.version}"),
            "src": lazy(
                lambda: fetchFromGitHub(
                    owner="NVIDIA", repo="nccl", tag=f"v{final.version}", hash=HASHES[final.version]
                )
            ),
            "outputs": ["out", "dev", "static"],
            "nativeBuildInputs": [cuda_nvcc],
            # Nixpkgs: (getInclude cuda_nvcc), cccl, cuda_cudart; nvcc has one output here.
            "buildInputs": [cuda_nvcc, cccl, cuda_cudart],
            "env": {"NIX_CFLAGS_COMPILE": "-Wno-unused-function"},
            "postPatch": lazy(post_patch),
            "makeFlags": lazy(
                lambda: [
                    "CXXSTD=-std=c++17",
                    f"CUDA_HOME={cuda_nvcc.outPath}",
                    f"CUDA_INC={cuda_cudart.include}/include",
                    f"CUDA_LIB={cuda_cudart.lib}/lib",
                    f"NVCC_GENCODE={flags.gencodeString}",
                    "PREFIX=$(out)",
                ]
            ),
            "enableParallelBuilding": True,
            # The installed nccl.pc names the build's $out: point it at the final path.
            "postInstall": (
                'sed -i "s|$out|${outputPaths[out]}|g" "$out"/lib/pkgconfig/*.pc\n'
                'mkdir -p "$dev/lib" "$static/lib"\n'
                'mv "$out/include" "$dev/include"\n'
                'mv "$out/lib/pkgconfig" "$dev/lib/pkgconfig"\n'
                'mv "$out/lib/libnccl_static.a" "$static/lib/"\n'
            ),
            "autoAddDriverRunpath": True,
            # Since CUDA 12.8 nvcc's path leaks into the fatbinary (NixOS/nixpkgs#457803).
            "removeReferencesTo": [cuda_nvcc],
            "disallowedReferences": [cuda_nvcc],
            "passthru": AttrSet({"platformAssertions": lazy(platform_assertions)}, name="nccl.passthru"),
            "meta": lazy(
                lambda: source_meta(
                    final,
                    config,
                    system,
                    {
                        "description": "Multi-GPU and multi-node collective communication primitives for NVIDIA GPUs",
                        "homepage": "https://developer.nvidia.com/nccl",
                        "license": licenses.bsd3,
                        "platforms": PLATFORMS,
                        # Read by `cudapkgs build --dry-run` (realise.scheduler.Plan.slow_builds).
                        "slowBuild": "about an hour on two cores (nvcc for every capability); NVIDIA's prebuilt "
                                     "wheel of the same version is the default (prebuiltWheels, docs/ml-stack.md)",
                    },
                )
            ),
        }

    return mk_derivation(config, attrs, system=system, name=f"{cudaNamePrefix}.nccl")
