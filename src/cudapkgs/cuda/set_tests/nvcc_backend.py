"""tests/nvcc-backend.nix@7dec1fd5f3d23b500258549ad5e0cee5e53a7d2b: a CMake project whose C++ compiler
is the project's own (stdenv.cc), while its CUDA sources go through nvcc with the set's backend
compiler; FindCUDAToolkit reports nvcc's version, defines CUDA::nvJitLink, and CMake's CUDA language
and CUDA::cudart use the set's nvcc and cudart.

Nixpkgs builds PyTorch's own CMake modules (`python3Packages.torch.src`'s cmake/ with its
find-cuda patch, legacy FindCUDA's `cuda_add_library`) with GCC 15 as the project compiler, and a
second set's nvcc as a BUILD-only input. Here torch is PyPI's wheel (no source tree), the host has
one GCC, and there is no depsBuildBuild: the project is written directly against CMake's
FindCUDAToolkit and CUDA language, the project compiler is the host's default (the test checks
each source was compiled by the compiler meant for it), and the legacy FindCUDA part is not
ported. The host's CMake (3.25 here) predates FindCUDAToolkit's CUDA::nvJitLink (3.27): with an older
one the test defines that target from the toolkit roots itself.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import lazy
from .common import first_arch, meta_of, run_command

SCRIPT = r"""
cat > CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(NvccBackend LANGUAGES C CXX CUDA)
find_package(CUDAToolkit REQUIRED)
if(NOT CUDAToolkit_VERSION VERSION_EQUAL "${NVCC_VERSION}")
  message(FATAL_ERROR "Incorrect toolkit version: ${CUDAToolkit_VERSION}, nvcc is ${NVCC_VERSION}")
endif()
if(CMAKE_VERSION VERSION_LESS 3.27)
  # FindCUDAToolkit defines CUDA::nvJitLink from CMake 3.27: an older host CMake gets it here, from
  # the toolkit roots setupCudaHook gives, so the rest of the check still holds.
  find_library(nvjitlink_library nvJitLink PATHS ${CUDAToolkit_ROOT} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  if(nvjitlink_library)
    add_library(CUDA::nvJitLink SHARED IMPORTED)
    set_target_properties(CUDA::nvJitLink PROPERTIES IMPORTED_LOCATION "${nvjitlink_library}")
  endif()
endif()
if(NOT TARGET CUDA::nvJitLink)
  message(FATAL_ERROR "CUDA::nvJitLink was not discovered")
endif()
file(REAL_PATH "${CMAKE_CUDA_COMPILER}" compiler)
file(REAL_PATH "${NVCC}" expected_compiler)
if(NOT compiler STREQUAL expected_compiler)
  message(FATAL_ERROR "CMake's CUDA language uses ${compiler}, not the set's nvcc ${expected_compiler}")
endif()
get_target_property(cudart CUDA::cudart IMPORTED_LOCATION)
file(REAL_PATH "${cudart}" cudart)
file(REAL_PATH "${CUDART}" expected_cudart)
if(NOT cudart STREQUAL expected_cudart)
  message(FATAL_ERROR "CUDA::cudart is ${cudart}, not the set's ${expected_cudart}")
endif()
add_library(modern SHARED modern.cu project.cpp)
target_link_libraries(modern PRIVATE CUDA::cudart CUDA::nvJitLink)
target_link_options(modern PRIVATE "LINKER:--no-undefined")
install(TARGETS modern DESTINATION lib)
CMAKE
cat > modern.cu <<CUDA
#if $backendMacro != $backendMajor
#error CUDA compilation did not use the set's backend compiler
#endif
#include <cuda_runtime.h>
#include <vector>
__global__ void kernel(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int launch(float* x) { kernel<<<1, 32>>>(x); return cudaGetLastError(); }
CUDA
cat > project.cpp <<CXX
#if $projectMacro != $projectMajor
#error the project's C++ compiler was replaced
#endif
#include <cuda_runtime_api.h>
#if CUDART_VERSION / 1000 != $cudaMajor
#error another release's CUDA headers reached the project's compiler
#endif
#include <vector>
int project_cpp() { return std::vector<int>{1, 2, 3}.size(); }
extern "C" int launch(float*);
extern "C" int project_launch(float* x) { return launch(x); }
CXX
cmake -S . -B build -G Ninja -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_INSTALL_PREFIX="$out" \
  "-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT" "-DCUDAToolkit_INCLUDE_DIR=$CUDAToolkit_INCLUDE_DIR" \
  -DNVCC_VERSION="$nvccVersion" -DNVCC="$nvcc/bin/nvcc" -DCUDART="$cudartLib/lib/libcudart.so"
cmake --build build --verbose
cmake --install build
cp build/CMakeCache.txt "$out/CMakeCache.txt"
"""


def _macro(compiler: Any) -> tuple[str, str]:
    info = dict(compiler.hostCompiler)
    return ("__clang_major__" if info["kind"] == "clang" else "__GNUC__"), str(info["major"])


def nvcc_backend(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-backend test of the set `cuda` (see the module docstring for what is ported)."""
    from ...stdenv.cc_wrapper import cc_wrapper_for

    top = cuda.auto_args
    tools = [top[name] for name in ("cmake", "ninja") if name in top]
    inputs = [cuda.cuda_cudart, cuda.cccl, cuda.libcublas, cuda.cuda_nvrtc, cuda.cuda_nvtx, cuda.libnvjitlink]
    project = cc_wrapper_for(config, cuda.backendStdenv.hostNixSystem)
    from .common import backend_cc

    backend, unavailable = backend_cc(cuda)
    backend_macro, backend_major = _macro(backend) if backend is not None else ("0", "1")
    project_macro, project_major = _macro(project) if project is not None else ("0", "1")
    return run_command(cuda, config, "nvcc-backend", SCRIPT, {
        "stdenvCc": project,
        "nativeBuildInputs": [*tools, cuda.cuda_nvcc],
        "buildInputs": inputs,
        "nvcc": cuda.cuda_nvcc, "nvccVersion": cuda.cuda_nvcc.version,
        "cudartLib": lazy(lambda: cuda.cuda_cudart.lib),
        "cudaMajor": cuda.cudaMajorVersion,
        "arch": first_arch(cuda),
        "backendMacro": backend_macro, "backendMajor": backend_major,
        "projectMacro": project_macro, "projectMajor": project_major,
        "removeReferencesTo": [cuda.cuda_nvcc],
        "meta": unavailable or meta_of(cuda.cuda_nvcc, *inputs),
    })
