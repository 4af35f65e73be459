"""libnvshmem: Nixpkgs' `cudaPackages.libnvshmem` built from source
(pkgs/development/cuda-modules/packages/libnvshmem.nix@ee7ded0ba23b65480c0f6823045ae0ee2f320806).

Version 3.4.5-0 (the newest Nixpkgs pins 3.6.5-0, whose source is not in the mirror), NVIDIA/nvshmem
tag v3.4.5-0 with that revision's hash; CMake with NCCL, gdrcopy, MPI, UCX, libfabric, IBGDA and
PMIx support, tests and examples; `{CXX,CUDA}_STANDARD 11` raised to 17 by substitution; the
broken assertion for CUDA older than 11.7; licensed nvidiaCudaRedist (unfree). Inputs the top
level does not have (cmake, ninja, mpi, python3Packages, libfabric, pmix, rdma-core, ucx) make it
broken with "<name> is available".
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import lazy
from ...lib.versions import version_at_least
from ..from_source import (CMAKE_BUILD, CMAKE_CONFIGURE, CMAKE_INSTALL, cmake_bool, cmake_feature, present,
                           resolve_externals, source_package)
from ..substitute import SUBSTITUTE_IN_PLACE

VERSION = "3.4.5-0"
HASH = "sha256-RHZzjDMYlL7vAVP1/UXM/Pt4bhajeWdCi3ihICeD2mc="
EXTERNALS = ("cmake", "ninja", "mpi", "python3Packages", "libfabric", "pmix", "rdma-core", "ucx")

POST_PATCH = SUBSTITUTE_IN_PLACE + """\
for standardName in CXX_STANDARD CUDA_STANDARD; do
  while IFS= read -r cmakeFileToPatch; do
    substituteInPlace "$PWD/$cmakeFileToPatch" --replace-fail "$standardName 11" "$standardName 17"
  done < <(grep --recursive --files-with-matches "$standardName 11" || true)
done
"""


def libnvshmem(backendStdenv: Any, cccl: Any, cuda_cudart: Any, cuda_nvcc: Any, cuda_nvml_dev: Any,
               cuda_nvtx: Any, cudaMajorMinorVersion: str, cudaNamePrefix: str, fetchFromGitHub: Any,
               flags: Any, gdrcopy: Any, nccl: Any, config: Any, top: Any) -> Any:
    """The libnvshmem package of a CUDA set."""
    externals = resolve_externals(top, EXTERNALS)

    def attrs(final: Any) -> dict[str, Any]:
        def cmake_flags() -> list[str]:
            return [
                cmake_feature("NVSHMEM_PREFIX", "$out"),
                cmake_feature("CUDA_HOME", cuda_nvcc.outPath),
                cmake_feature("CMAKE_CUDA_COMPILER", f"{cuda_nvcc.outPath}/bin/nvcc"),
                cmake_feature("CMAKE_CUDA_ARCHITECTURES", flags.cmakeCudaArchitecturesString),
                cmake_bool("NVSHMEM_USE_NCCL", True), cmake_feature("NCCL_HOME", nccl.dev),
                cmake_bool("NVSHMEM_USE_GDRCOPY", True), cmake_feature("GDRCOPY_HOME", gdrcopy.outPath),
                cmake_bool("NVSHMEM_MPI_SUPPORT", True), cmake_bool("NVSHMEM_UCX_SUPPORT", True),
                cmake_bool("NVSHMEM_LIBFABRIC_SUPPORT", True), cmake_bool("NVSHMEM_IBGDA_SUPPORT", True),
                cmake_bool("NVSHMEM_PMIX_SUPPORT", True), cmake_bool("NVSHMEM_BUILD_TESTS", True),
                cmake_bool("NVSHMEM_BUILD_EXAMPLES", True), cmake_bool("NVSHMEM_BUILD_DEB_PACKAGE", False),
                cmake_bool("NVSHMEM_BUILD_RPM_PACKAGE", False), cmake_bool("NVSHMEM_BUILD_PYTHON_LIB", False),
                cmake_bool("NVSHMEM_BUILD_BITCODE_LIBRARY", False),
            ]

        return {
            "outputs": ["out"],
            "nativeBuildInputs": present(cuda_nvcc, externals["cmake"], externals["ninja"], externals["mpi"]),
            "buildInputs": present(cccl, cuda_cudart, cuda_nvml_dev, cuda_nvtx, gdrcopy, externals["libfabric"],
                                   nccl, externals["pmix"], externals["rdma-core"], externals["ucx"]),
            "postPatch": POST_PATCH,
            "env": lazy(lambda: {"CUDA_HOME": cuda_nvcc.outPath}),
            "cmakeFlags": lazy(cmake_flags),
            "configurePhase": CMAKE_CONFIGURE, "buildPhase": CMAKE_BUILD,
            "installPhase": CMAKE_INSTALL
            + 'mv -v "$out"/{changelog,git_commit.txt,License.txt,version.txt} "$out/share/"\n',
            "enableParallelBuilding": True,
            "doCheck": False,
        }

    return source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=cudaNamePrefix,
        pname="libnvshmem", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="nvshmem", tag=f"v{VERSION}", hash=HASH),
        meta={"description": "Parallel programming interface for NVIDIA GPUs based on OpenSHMEM",
              "homepage": "https://github.com/NVIDIA/nvshmem", "license": [licenses.nvidiaCudaRedist]},
        attrs=attrs, externals=externals,
        broken_assertions=lambda: [{
            "message": f"NVSHMEM does not support CUDA releases earlier than 11.7 (found {cudaMajorMinorVersion})",
            "assertion": version_at_least(cudaMajorMinorVersion, "11.7"),
        }],
    )
