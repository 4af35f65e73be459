"""nccl-ep: NCCL's expert-parallelism (MoE dispatch/combine) library, Nixpkgs' `cudaPackages.nccl-ep`.

Follows pkgs/development/cuda-modules/packages/nccl-ep.nix@c12d1f6869b8d0656a6494fe08d9d11e95e25df5:
NCCL's own source and version (`inherit (nccl) src version`, so the same fetchFromGitHub hash),
built in ``contrib/nccl_ep`` with make target ``lib``, for the set's capabilities of 9.0 and newer
(`NVCC_GENCODE` only when there is one), against NCCL's library, cccl, cudart and nvcc's headers
(cuda_crt from CUDA 13); the installed tree keeps links to NCCL's headers. Its platforms and bad
platforms are NCCL's. The source is NVIDIA/nccl v2.30.7-1, which a source mirror holds, so it
builds offline where NCCL does.

Differences: `which` is the host's (the builder's PATH has /usr/bin); the link-time `libcuda.so`
is cuda_cudart's stubs output here (`lib/stubs`), where Nixpkgs writes `getLib cuda_cudart`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import flags as flag_lib
from ... import licenses
from ...build_inputs import get_lib
from ...lib.fixpoint import lazy
from ...lib.versions import version_at_least
from ...meta import source_meta
from ...stdenv import mk_derivation

INSTALL = """\
rm -rf "$out/obj"
ln -s "$ncclInclude/include/nccl.h" "$out/include/nccl.h"
ln -s "$ncclInclude/include/nccl_device.h" "$out/include/nccl_device.h"
ln -s "$ncclInclude/include/nccl_device" "$out/include/nccl_device"
"""


def ep_capabilities(capabilities: list[str]) -> list[str]:
    """The capabilities nccl-ep is built for: those of 9.0 and newer (nccl-ep.nix's epFlags)."""
    return [c for c in capabilities if version_at_least(c, "9.0")]


def nccl_ep(_cuda: Any, backendStdenv: Any, cudaAtLeast: Any, cudaNamePrefix: str, autoAddDriverRunpath: Any,
            cuda_nvcc: Any, cccl: Any, cuda_cudart: Any, nccl: Any, config: Any, cuda_crt: Any = None) -> Any:
    """The nccl-ep package of a CUDA set (callPackage'd inside the set's scope)."""
    system = backendStdenv.hostNixSystem

    def attrs(final: Any) -> dict[str, Any]:
        def ep_flags() -> dict[str, Any]:
            return flag_lib.format_capabilities(
                _cuda.db.cudaCapabilityToInfo, ep_capabilities(list(backendStdenv.cudaCapabilities)),
                backendStdenv.cudaForwardCompat,
            )

        def make_flags() -> list[str]:
            flags = [
                f"CUDA_HOME={cuda_nvcc.outPath}",
                f"CUDA_INC={cuda_cudart.include}/include",
                f"CUDA_LIB={cuda_cudart.lib}/lib",
                f"LDFLAGS=-L{cuda_cudart.stubs}/lib/stubs",
                f"NCCL_INCDIR={nccl.dev}/include",
                f"NCCL_LIBDIR={nccl.out}/lib",
                "NCCL_EP_BUILDDIR=$(out)",
            ]
            ep = ep_flags()
            if ep["cudaCapabilities"]:
                flags.append(f"NVCC_GENCODE={ep['gencodeString']}")
            return flags

        return {
            "pname": "nccl-ep",
            "version": nccl.version,
            "name": lazy(lambda: f"{cudaNamePrefix}-{final.pname}-{final.version}"),
            "src": lazy(lambda: nccl.src),
            "sourceRoot": "source/contrib/nccl_ep",
            "nativeBuildInputs": [autoAddDriverRunpath, cuda_nvcc],
            # (lib.getLib nccl); nvcc's headers below CUDA 13, cuda_crt from 13.0
            "buildInputs": [cccl, cuda_cudart, get_lib(nccl)] + ([cuda_crt] if cudaAtLeast("13.0") and cuda_crt is not None
                                                                 else [cuda_nvcc]),
            "makeFlags": lazy(make_flags),
            "buildFlags": ["lib"],
            "ncclInclude": lazy(lambda: nccl.dev),
            "installPhase": INSTALL,
            "removeReferencesTo": [cuda_nvcc],
            "disallowedReferences": [cuda_nvcc],
            "passthru": {"platformAssertions": lazy(lambda: list(nccl.passthru["platformAssertions"]))},
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "Expert-parallelism (MoE dispatch/combine) extension library for NCCL",
                "homepage": "https://github.com/NVIDIA/nccl/blob/master/contrib/nccl_ep/README.md",
                "license": licenses.asl20,
                "platforms": list(nccl.meta.platforms),
            })),
        }

    return mk_derivation(config, attrs, system=system, name=f"{cudaNamePrefix}.nccl-ep")
