"""cuda-samples: Nixpkgs' `cudaPackages.cuda-samples` (pkgs/development/cuda-modules/packages/cuda-samples.nix@2919d13e3b61b7f5e1da7556addab203206ab114).

Version 12.8 for every set, NVIDIA/cuda-samples tag v12.8 with Nixpkgs' hash (its archive is not in
the mirror: it evaluates; building needs GitHub); CMake with `CMAKE_CUDA_ARCHITECTURES` from the
set's flags and `BUILD_TEGRA` on Jetson, samples that cannot build here removed by substitution,
as Nixpkgs does; licensed nvidiaCuda (unfree). Without a top-level cmake it is broken with
"cmake is available".
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ... import licenses
from ...lib.fixpoint import lazy
from ...lib.versions import version_older
from ..from_source import CMAKE_BUILD, CMAKE_CONFIGURE, cmake_bool, cmake_feature, present, resolve_externals, source_package
from ..substitute import SUBSTITUTE_IN_PLACE

VERSION = "12.8"
HASH = "sha256-Ba0Fi0v/sQ+1iJ4mslgyIAE+oK5KO0lMoTQCC91vpiA="
INSTALL = """\
cd build
find "$PWD/Samples" -type d -name CMakeFiles -exec rm -rf {} +
find "$PWD/Samples" -type f -name cmake_install.cmake -exec rm -rf {} +
find "$PWD/Samples" -type f -name Makefile -exec rm -rf {} +
mkdir -p "$out"
cp -r "$PWD/Samples"/* "$out/"
"""


def _disable(path: str, line: str) -> str:
    return f"substituteInPlace \"{path}\" --replace-fail '{line}' '# {line}'\n"


def cuda_samples(backendStdenv: Any, cccl: Any, cuda_cudart: Any, cuda_nvcc: Any, cuda_nvrtc: Any,
                 cuda_nvtx: Any, cuda_profiler_api: Any, cudaMajorMinorVersion: str, cudaNamePrefix: str,
                 fetchFromGitHub: Any, flags: Any, libcublas: Any, libcufft: Any, libcurand: Any,
                 libcusolver: Any, libcusparse: Any, libnpp: Any, libnvjitlink: Any, libnvjpeg: Any,
                 config: Any, top: Any) -> Any:
    """The cuda-samples package of a CUDA set."""
    externals = resolve_externals(top, ("cmake",))
    older = lambda v: version_older(cudaMajorMinorVersion, v)  # noqa: E731

    def pre_patch() -> str:
        s = "Samples"
        text = SUBSTITUTE_IN_PLACE + _disable(f"{s}/0_Introduction/CMakeLists.txt", "add_subdirectory(UnifiedMemoryStreams)")
        for sample in ("cdpAdvancedQuicksort", "cdpBezierTessellation", "cdpQuadtree", "cdpSimplePrint",
                       "cdpSimpleQuicksort"):
            text += _disable(f"{s}/3_CUDA_Features/CMakeLists.txt", f"add_subdirectory({sample})")
        if older("12.4"):
            text += _disable(f"{s}/3_CUDA_Features/CMakeLists.txt", "add_subdirectory(graphConditionalNodes)")
            text += _disable(f"{s}/4_CUDA_Libraries/CMakeLists.txt", "add_subdirectory(jitLto)")
        text += (f"substituteInPlace {s}/4_CUDA_Libraries/simpleCUFFT_callback/CMakeLists.txt "
                 "--replace-fail 'CUDA::cufft_static' 'CUDA::cufft'\n")
        if not older("12.4"):
            text += (f"substituteInPlace {s}/4_CUDA_Libraries/jitLto/CMakeLists.txt --replace-fail "
                     f"'${{CUDAToolkit_LIBRARY_DIR}}/libnvJitLink.so' '{libnvjitlink.lib}/lib/libnvJitLink.so'\n")
        if older("12.8"):
            text += _disable(f"{s}/4_CUDA_Libraries/CMakeLists.txt", "add_subdirectory(watershedSegmentationNPP)")
        text += _disable(f"{s}/CMakeLists.txt", "add_subdirectory(7_libNVVM)")
        text += ("grep -rl --null 'set(CMAKE_CUDA_ARCHITECTURES' . | while IFS= read -r -d '' path; do "
                 "substituteInPlace \"$path\" --replace-fail 'set(CMAKE_CUDA_ARCHITECTURES' "
                 "'# set(CMAKE_CUDA_ARCHITECTURES'; done\n")
        return text

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "prePatch": lazy(pre_patch),
            "nativeBuildInputs": present(externals["cmake"], cuda_nvcc),
            "buildInputs": [cccl, cuda_cudart, cuda_nvrtc, cuda_nvtx, cuda_profiler_api, libcublas, libcufft,
                            libcurand, libcusolver, libcusparse, libnpp, libnvjitlink, libnvjpeg],
            "cmakeFlags": lazy(lambda: [
                cmake_feature("CMAKE_CUDA_ARCHITECTURES", flags.cmakeCudaArchitecturesString),
                cmake_bool("BUILD_TEGRA", bool(backendStdenv.hasJetsonCudaCapability)),
            ]),
            "configurePhase": CMAKE_CONFIGURE.replace("-G Ninja ", ""), "buildPhase": CMAKE_BUILD,
            "installPhase": INSTALL,
        }

    return source_package(
        config=config, system=backendStdenv.hostNixSystem, cuda_name_prefix=cudaNamePrefix,
        pname="cuda-samples", version=VERSION,
        fetch=lambda: fetchFromGitHub(owner="NVIDIA", repo="cuda-samples", tag=f"v{VERSION}", hash=HASH),
        meta={"description": "Samples for CUDA Developers which demonstrates features in CUDA Toolkit",
              "homepage": "https://github.com/NVIDIA/cuda-samples", "license": [licenses.nvidiaCuda]},
        attrs=attrs, externals=externals,
    )
