"""The CMake consumer tests: tests/{nvcc-cmake,libcudss-cmake,cutlass-cmake,nvshmem-cmake}.nix
(@1dbbce67, @26755e81, @613b8b48, @31de383e). Each configures a small project with the host's CMake
and Ninja against a package's installed CMake interface (FindCUDAToolkit's CUDA::cudart; cudss's
cudss-config.cmake; NvidiaCutlass; NVSHMEM) and builds it; a consumer that needs no GPU runs.

Differences: Nixpkgs runs CMake "standalone" (no setup hook, CUDAToolkit_ROOT the nvcc prefix
alone); here CUDAToolkit_ROOT is what setupCudaHook gives the build (every marked input), since
this set's toolkit is split in components that nvcc's prefix does not hold, with
CUDAToolkit_INCLUDE_DIR beside it (the cmake builder passes both, hooks/setup_cuda.py). cutlass and
libnvshmem are unavailable here (missing inputs; say `meta.problems`), so their tests evaluate
and are skipped with that reason.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import lazy
from .common import dev_output, run_command

NVCC_CMAKE = r"""
cat > CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(cuda_consumer LANGUAGES CXX)
find_package(CUDAToolkit REQUIRED)
foreach(required IN ITEMS "${CUDART_INCLUDE}" "${CCCL_INCLUDE}")
  if(NOT required IN_LIST CUDAToolkit_INCLUDE_DIRS)
    message(FATAL_ERROR "Missing target header directory: ${required} (have ${CUDAToolkit_INCLUDE_DIRS})")
  endif()
endforeach()
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE CUDA::cudart)
CMAKE
cat > main.cpp <<'CPP'
#include <cuda_runtime.h>
#include <cuda/std/type_traits>
static_assert(cuda::std::is_integral<int>::value, "cccl headers");
int main() {
  int version = 0;
  return cudaRuntimeGetVersion(&version) != cudaSuccess || version == 0;
}
CPP
cmake -S . -B build -G Ninja -DCMAKE_CXX_COMPILER="$CXX" "-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT" \
  "-DCUDAToolkit_INCLUDE_DIR=$CUDAToolkit_INCLUDE_DIR" \
  "-DCUDART_INCLUDE=$cudartInclude/include" "-DCCCL_INCLUDE=$ccclInclude/include"
cmake --build build --verbose
mkdir -p "$out"
cp build/consumer build/CMakeCache.txt "$out/"
"$out/consumer"
"""

LIBCUDSS_CMAKE = r"""
cat > CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(cudss_consumer LANGUAGES CXX)
find_package(cudss REQUIRED CONFIG COMPONENTS cudss_static)
foreach(library IN ITEMS cudss cudss_static)
  add_executable(${library}_consumer main.cpp)
  target_link_libraries(${library}_consumer PRIVATE ${library})
endforeach()
CMAKE
cat > main.cpp <<'CPP'
#include <cudss.h>
int main(int argc, char **) {
  if (argc > 1) { cudssHandle_t handle; return cudssCreate(&handle); }
  int version = -1;
  return cudssGetProperty(MAJOR_VERSION, &version) != CUDSS_STATUS_SUCCESS || version != CUDSS_VERSION_MAJOR;
}
CPP
cmake -S . -B build -G Ninja -DCMAKE_CXX_COMPILER="$CXX" "-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT" \
  "-Dcudss_DIR=$cudssDev/lib/cmake/cudss"
cmake --build build --verbose
mkdir -p "$out"
cp build/cudss_consumer build/cudss_static_consumer build/CMakeCache.txt "$out/"
"$out/cudss_consumer"
"$out/cudss_static_consumer"
"""

CUTLASS_CMAKE = r"""
cat > main.cpp <<'CPP'
#include <cutlass/numeric_types.h>
static_assert(cutlass::sizeof_bits<cutlass::half_t>::value == 16, "half is 16 bits");
int main() { cutlass::half_t value(1.5f); return float(value) != 1.5f; }
CPP
mkdir -p "$out/bin"
"$CXX" -std=c++17 main.cpp -o "$out/bin/headers"
cat > CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(cutlass_consumer LANGUAGES CXX)
find_package(NvidiaCutlass CONFIG REQUIRED)
add_executable(consumer main.cpp)
target_compile_features(consumer PRIVATE cxx_std_17)
target_link_libraries(consumer PRIVATE nvidia::cutlass::cutlass)
CMAKE
cmake -S . -B build -G Ninja -DCMAKE_CXX_COMPILER="$CXX" "-DCMAKE_PREFIX_PATH=$cutlass" \
  "-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT"
cmake --build build --verbose
cp build/consumer "$out/bin/cmake"
"$out/bin/headers" && "$out/bin/cmake"
"""

NVSHMEM_CMAKE = r"""
cat > CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(nvshmem_consumer LANGUAGES CXX)
find_package(NVSHMEM CONFIG REQUIRED)
add_executable(host host.cpp)
target_link_libraries(host PRIVATE nvshmem::nvshmem_host)
enable_language(CUDA)
add_executable(device device.cu)
set_target_properties(device PROPERTIES CUDA_SEPARABLE_COMPILATION ON)
target_link_libraries(device PRIVATE nvshmem::nvshmem_device nvshmem::nvshmem_host)
CMAKE
printf '#include <nvshmem_host.h>\nint main() { char name[256]{}; nvshmem_info_get_name(name); return name[0] == 0; }\n' > host.cpp
printf '#include <nvshmem.h>\n__global__ void rank(int *out) { *out = nvshmem_my_pe(); }\nint main() { return 0; }\n' > device.cu
cmake -S . -B build -G Ninja -DCMAKE_CXX_COMPILER="$CXX" "-DCMAKE_CUDA_COMPILER=$CUDACXX" \
  "-DCMAKE_CUDA_ARCHITECTURES=$cudaArchitectures" "-DNVSHMEM_DIR=$nvshmem/lib/cmake/nvshmem"
cmake --build build --verbose
mkdir -p "$out/bin"
cp build/host build/device "$out/bin/"
"$out/bin/host"
"""


def _tools(cuda: Any) -> list[Any]:
    top = cuda.auto_args
    return [top[name] for name in ("cmake", "ninja") if name in top]


def nvcc_cmake(cuda: Any, config: Any, system: str) -> Any:
    """tests/nvcc-cmake.nix: FindCUDAToolkit finds cudart's and cccl's headers and links CUDA::cudart."""
    return run_command(cuda, config, "nvcc-cmake", NVCC_CMAKE, {
        "nativeBuildInputs": [*_tools(cuda), cuda.cuda_nvcc],
        "buildInputs": [cuda.cuda_cudart, cuda.cccl],
        "cudartInclude": lazy(lambda: cuda.cuda_cudart.include), "ccclInclude": lazy(lambda: cuda.cccl.out),
        "removeReferencesTo": [cuda.cuda_nvcc],
    })


def libcudss_cmake(cuda: Any, config: Any, system: str) -> Any:
    """tests/libcudss-cmake.nix: cudss's CMake config gives both the shared and the static library."""
    return run_command(cuda, config, "libcudss-cmake", LIBCUDSS_CMAKE, {
        "nativeBuildInputs": [*_tools(cuda), cuda.cuda_nvcc],
        "buildInputs": [cuda.libcudss],
        "cudssDev": lazy(lambda: dev_output(cuda.libcudss)),
        "removeReferencesTo": [cuda.cuda_nvcc],
        "meta": {"available": bool(cuda.libcudss.meta.available)},
    })


def cutlass_cmake(cuda: Any, config: Any, system: str) -> Any:
    """tests/cutlass-cmake.nix: cutlass's headers alone, and its NvidiaCutlass CMake config."""
    cutlass = cuda.cutlass
    return run_command(cuda, config, "cutlass-cmake", CUTLASS_CMAKE, {
        "name": f"{cutlass.name}-cmake-consumer",
        "nativeBuildInputs": [*_tools(cuda), cuda.cuda_nvcc],
        "buildInputs": [cutlass],
        "cutlass": cutlass,
        "removeReferencesTo": [cuda.cuda_nvcc],
        "meta": {"available": bool(cutlass.meta.available), "problems": dict(cutlass.meta.get("problems") or {})},
    })


def nvshmem_cmake(cuda: Any, config: Any, system: str) -> Any:
    """tests/nvshmem-cmake.nix: NVSHMEM's CMake config gives the host and device libraries."""
    nvshmem = cuda.libnvshmem
    return run_command(cuda, config, "nvshmem-cmake", NVSHMEM_CMAKE, {
        "nativeBuildInputs": [*_tools(cuda), cuda.cuda_nvcc],
        "buildInputs": [nvshmem],
        "nvshmem": nvshmem,
        "cudaArchitectures": cuda.flags.cmakeCudaArchitecturesString,
        "removeReferencesTo": [cuda.cuda_nvcc],
        "meta": {"available": bool(nvshmem.meta.available), "problems": dict(nvshmem.meta.get("problems") or {})},
    })
