"""gdrcopy: Nixpkgs' `cudaPackages.gdrcopy` (pkgs/development/cuda-modules/packages/gdrcopy.nix@0b73a0c2114322292ae614235b7c50da19226483).

Version 2.5.1 from NVIDIA/gdrcopy tag v2.5.1 with Nixpkgs' hash; make targets `lib exes` (not
`all`, which needs the driver's source) with `CUDA`/`NVCC` given; the Makefiles' `/\\#` awk
escapes, `lib64` and the tests' CUDA version/gencode probes replaced by substitution; installed
with `DESTDIR=$out prefix=/`; MIT. One addition (see the comment in `attrs`): nvcc's store path
is scrubbed from the outputs (`removeReferencesTo`, checked by `disallowedReferences`). The test
programs link `-lcuda` against cuda_cudart's `stubs` output (for wheel-sourced cudart, the stub
`link_stub.py` generates).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ..from_source import source_package
from ..substitute import SUBSTITUTE_IN_PLACE

VERSION = "2.5.1"
HASH = "sha256-2cDsDc1lGW9rNF1q3EhjmiJhNaIwuFYlNdooPe7/R2I="


def gdrcopy(backendStdenv: Any, cuda_cudart: Any, cuda_nvcc: Any, cudaMajorMinorVersion: str,
            cudaNamePrefix: str, fetchFromGitHub: Any, flags: Any, config: Any) -> Any:
    """The gdrcopy package of a CUDA set."""

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "outputs": ["out"],
            "nativeBuildInputs": [cuda_nvcc],
            "buildInputs": [cuda_cudart],
            "postPatch": lambda_text(cudaMajorMinorVersion, flags),
            "enableParallelBuilding": True,
            "buildFlags": lazy_flags(cuda_cudart, cuda_nvcc),
            "installFlags": ['DESTDIR=$(out)', "prefix=/"],
            "doCheck": False,
            # Not in gdrcopy.nix@0b73a0c2: nvcc writes its own store path into the fatbinary of the one
            # test program with device code (gdrcopy_pplat, from pplat.cu), which would put all of nvcc
            # in the run-time closure (the generic builder refuses that). Nixpkgs' nccl.nix@0145c6da
            # scrubs the same leak with remove-references-to + disallowedRequisites (NixOS/nixpkgs#457803).
            "removeReferencesTo": [cuda_nvcc],
            "disallowedReferences": [cuda_nvcc],
        }

    return source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=cudaNamePrefix,
        pname="gdrcopy", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="gdrcopy", tag=f"v{VERSION}", hash=HASH),
        meta={"description": "Fast GPU memory copy library based on NVIDIA GPUDirect RDMA technology",
              "homepage": "https://github.com/NVIDIA/gdrcopy", "license": licenses.mit},
        attrs=attrs,
    )


def lambda_text(cuda_mm: str, flags: Any) -> Any:
    from ...lib.fixpoint import lazy

    def text() -> str:
        return SUBSTITUTE_IN_PLACE + (
            "substituteInPlace \"$PWD/Makefile\" --replace-fail '/\\#' '/#' --replace-fail 'lib64' 'lib'\n"
            "substituteInPlace \"$PWD/src/Makefile\" --replace-fail '/\\#' '/#'\n"
            "substituteInPlace \"$PWD/tests/Makefile\" "
            "--replace-fail 'CUDA_VERSION := $(shell $(GET_CUDA_VERSION) $(NVCC))' "
            f"'CUDA_VERSION := {cuda_mm}' "
            "--replace-fail 'NVCCFLAGS ?= $(shell $(GET_CUDA_GENCODE) $(NVCC)) $(NVCC_STD)' "
            f"'NVCCFLAGS ?= {flags.gencodeString} $(NVCC_STD)' "
            "--replace-fail 'lib64' 'lib'\n"
        )

    return lazy(text)


def lazy_flags(cuda_cudart: Any, cuda_nvcc: Any) -> Any:
    from ...lib.fixpoint import lazy

    return lazy(lambda: [f"CUDA={cuda_cudart.lib}", f"NVCC={cuda_nvcc.outPath}/bin/nvcc", "lib", "exes"])
