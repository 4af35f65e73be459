"""nccl-tests: Nixpkgs' `cudaPackages.nccl-tests`, NCCL's performance and correctness tests.

Follows pkgs/development/cuda-modules/packages/nccl-tests.nix@0e4c430160f77d43619a4c8ae9b528dbc3b6c973:
version 2.18.2, `fetchFromGitHub` NVIDIA/nccl-tests rev `v2.18.2` with Nixpkgs' hash, NVIDIA's
`-ccbin $(CXX)` removed from src/common.mk by substitution, make with the set's gencode, every
executable under build/ installed to `$out/bin`, the broken assertion "mpi is non-null when
mpiSupport is true". `passthru.tests.cuda.all-reduce` runs `all_reduce_perf` on the machine's
GPUs (`requiredSystemFeatures = ["cuda"]`) and fails when any size reports a wrong result.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import AttrSet, lazy
from ...stdenv import DerivationPackage, mk_derivation
from ...meta import source_meta
from ..substitute import SUBSTITUTE_IN_PLACE

VERSION = "2.18.2"
HASH = "sha256-CFLCNtDxCq8WDqbPO6CI+cwBFtgk2RO2+J3tQs6iInY="  # nccl-tests.nix@0e4c4301
PLATFORMS = ["aarch64-linux", "x86_64-linux"]

INSTALL = 'mkdir -p "$out/bin"\ninstall -Dm755 $(find build -type f -executable) "$out/bin"\n'

# Runs all_reduce_perf on every GPU the builder sees and fails unless every line says "#wrong 0"
# (the out-of-place and in-place error counts are the 9th and 13th fields of a result line).
ALL_REDUCE_CHECK = r'''
ngpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpus" -ge 1 ] || { echo "no GPU visible" >&2; exit 1; }
all_reduce_perf -b 8 -e 128M -f 2 -g "$ngpus" | tee log
grep -q "Avg bus bandwidth" log
awk '/^ *[0-9]+ +[0-9]+ +float/ { if ($9 != 0 || $13 != 0) bad = 1 } END { exit bad }' log
'''


def nccl_tests(
    backendStdenv: Any,
    cuda_cccl: Any,
    cuda_cudart: Any,
    cuda_nvcc: Any,
    cudaNamePrefix: str,
    fetchFromGitHub: Any,
    flags: Any,
    nccl: Any,
    config: Any,
    mpi: Any = None,
    mpiSupport: bool = False,
    system: str | None = None,
) -> DerivationPackage:
    """The nccl-tests package of a CUDA set (callPackage'd inside the set's scope)."""
    system = system or backendStdenv.hostNixSystem

    def attrs(final: AttrSet) -> dict[str, Any]:
        return {
            "pname": "nccl-tests",
            "version": VERSION,
            "name": lazy(lambda: f"{cudaNamePrefix}-{final.pname}-{final.version}"),
            "src": lazy(
                lambda: fetchFromGitHub(owner="NVIDIA", repo="nccl-tests", rev=f"v{final.version}", hash=HASH)
            ),
            "postPatch": SUBSTITUTE_IN_PLACE
            + "substituteInPlace ./src/common.mk --replace-fail '-ccbin $(CXX)' ''\n",
            "nativeBuildInputs": [cuda_nvcc],
            "buildInputs": [cuda_cccl, cuda_cudart, nccl] + ([mpi] if mpiSupport and mpi is not None else []),
            "makeFlags": lazy(
                lambda: [
                    "CXXSTD=-std=c++17",
                    f"CUDA_HOME={cuda_nvcc.outPath}",
                    f"CUDA_INC={cuda_cudart.include}/include",
                    f"CUDA_LIB={cuda_cudart.lib}/lib",
                    f"NVCC_GENCODE={flags.gencodeString}",
                    "PREFIX=$(out)",
                ]
                + (["MPI=1"] if mpiSupport else [])
            ),
            "enableParallelBuilding": True,
            "installPhase": INSTALL,
            "autoAddDriverRunpath": True,
            "removeReferencesTo": [cuda_nvcc],
            "disallowedReferences": [cuda_nvcc],
            "passthru": AttrSet(
                {
                    "brokenAssertions": [
                        {"message": "mpi is non-null when mpiSupport is true",
                         "assertion": not mpiSupport or mpi is not None}
                    ],
                    "tests": lazy(lambda: {"cuda": {"all-reduce": _all_reduce_test(final, config, system)}}),
                },
                name="nccl-tests.passthru",
            ),
            "meta": lazy(
                lambda: source_meta(
                    final,
                    config,
                    system,
                    {
                        "description": "Tests to check both the performance and the correctness of NVIDIA NCCL operations",
                        "homepage": "https://github.com/NVIDIA/nccl-tests",
                        "license": licenses.bsd3,
                        "platforms": PLATFORMS,
                        "mainProgram": "all_reduce_perf",
                    },
                )
            ),
        }

    return mk_derivation(config, attrs, system=system, name=f"{cudaNamePrefix}.nccl-tests")


def _all_reduce_test(final: AttrSet, config: Any, system: str) -> DerivationPackage:
    return mk_derivation(
        config,
        {
            "pname": "nccl-tests-all-reduce",
            "version": final.version,
            "nativeBuildInputs": [final.derivation],
            "buildPhase": ALL_REDUCE_CHECK,
            "installPhase": 'install -Dm644 log "$out/log"',
            "requiredSystemFeatures": ["cuda"],
            "meta": {"description": "all_reduce_perf on every visible GPU; fails on any wrong result"},
        },
        system=system,
        name="nccl-tests.tests.cuda.all-reduce",
    )
