"""tests/nvcc-roles.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: two nvccs of different CUDA releases
in one build, each compiling and linking with its own release's runtime and libraries.

Nixpkgs puts a BUILD-role set (cudaPackages_13 beside a CUDA 12 set, else cudaPackages_12_9) in
`depsBuildBuild`, so its wrapper exports `CUDACXX_FOR_BUILD` and `NIX_CUDA_MAJOR_MINOR_VERSION_FOR_BUILD`
beside the HOST `CUDACXX`, and checks each wrapper takes its own role's SDK from one shared
environment. cudapkgs does not cross-compile and has no dependency kinds besides native and host
inputs (each set's `pkgsBuildHost` is the set itself): the BUILD set's nvcc, cudart, cublas and their
headers reach the build as named paths, the HOST set's as ordinary inputs, and the test checks the
split holds: each program was compiled with its own release's headers (CUDART_VERSION, printed by
the program), needs its own release's libcudart and libcublas sonames, `-rdc=true` links device code
with each release's cudadevrt, and both are ELF for the host machine. With `fetchers = ["wheels"]` a
CUDA 12 nvcc cannot be fetched (no wheel): a CUDA 13 set is then paired with another CUDA 13 release
(`build_role_set`), and a CUDA 12 set's test says why it cannot build.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import lazy
from .common import broken_meta, check, evaluated, meta_of, run_command, wheels_lack_nvcc

SAXPY = r"""
#include <cstdio>
#include <zlib.h>
#include <cublas_v2.h>
__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void dispatch(int n, float a, float *x, float *y) { saxpy<<<(n + 255) / 256, 256>>>(n, a, x, y); }
int main(int argc, char **argv) {
  if (argc > 1) { printf("%d\n", CUDART_VERSION); return 0; }  // the headers this program was compiled with
  puts(zlibVersion());
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 0;
  return 0;
}
"""

SCRIPT = r"""
test -z "${NVCC_PREPEND_FLAGS-}"
printf '%s' "$saxpySource" > saxpy.cu
"$CUDACXX" -arch=sm_80 -rdc=true --cudart shared -lcublas -lz saxpy.cu -o saxpy-host
"$nvccForBuild/bin/nvcc" -arch=sm_80 -rdc=true --cudart shared \
  -I"$buildCudartInclude/include" -I"$buildCublasInclude/include" -I"$buildCccl/include" \
  -L"$buildCudartLib/lib" -L"$buildCudartStatic/lib" -L"$buildCublasLib/lib" -lcublas -lz saxpy.cu -o saxpy-build
needed() { readelf -d "$1" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; }
needed saxpy-host | grep -qx "libcudart.so.$hostMajor"
needed saxpy-host | grep -qx "libcublas.so.$hostCublasMajor"
needed saxpy-build | grep -qx "libcudart.so.$buildMajor"
needed saxpy-build | grep -qx "libcublas.so.$buildCublasMajor"
test "$(./saxpy-host --cudart-version)" = "$hostCudartVersion"
test "$(./saxpy-build --cudart-version)" = "$buildCudartVersion"
readelf -h saxpy-host | grep -F 'Machine:' | grep -F "$elfMachine"
readelf -h saxpy-build | grep -F 'Machine:' | grep -F "$elfMachine"
mkdir -p "$out/bin" "$build/bin"
cp saxpy-host "$out/bin/saxpy"
cp saxpy-build "$build/bin/saxpy"
"""


def cudart_version(cuda: Any) -> str:
    """CUDART_VERSION of a set's headers: major * 1000 + minor * 10 ("13000" for CUDA 13.0)."""
    major, minor = str(cuda.cudaMajorMinorVersion).split(".")[:2]
    return str(int(major) * 1000 + int(minor) * 10)


def build_role_set(cuda: Any, config: Any) -> Any:
    """The BUILD-role set nvcc-roles pairs with `cuda`: Nixpkgs' choice (cudaPackages_13 beside a CUDA 12
    set, else cudaPackages_12_9), except that where sources come from NVIDIA's wheels only (CUDA 12's
    nvcc has no wheel) a CUDA 13 set is paired with the newest other CUDA 13 release, whose different
    headers the programs' CUDART_VERSION tells apart."""
    top = cuda.pkgs
    if str(cuda.cudaMajorVersion) == "12":
        return top.cudaPackages_13
    if tuple(config.fetchers) == ("wheels",):
        from ...lib.versions import major_minor, version_older
        from ...package_sets import package_set_definitions

        others = [d for d in package_set_definitions().values() if d.cuda_version.startswith("13.")
                  and major_minor(d.cuda_version) != cuda.cudaMajorMinorVersion]
        newest = others[0]
        for definition in others[1:]:
            if version_older(newest.cuda_version, definition.cuda_version):
                newest = definition
        return top[newest.name]
    return top.cudaPackages_12_9


def nvcc_roles(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-roles test of the set `cuda` (see the module docstring)."""
    build_cuda = build_role_set(cuda, config)
    zlib = cuda.auto_args.get("zlib")
    host_inputs = [cuda.cuda_cudart, cuda.libcublas, cuda.cccl] + ([zlib] if zlib is not None else [])
    gap = wheels_lack_nvcc(cuda, config) or wheels_lack_nvcc(build_cuda, config)

    def checks() -> None:
        check(cuda, "nvcc-roles", cuda.pkgsBuildHost.cuda_nvcc.drvPath == cuda.cuda_nvcc.drvPath,
              "pkgsBuildHost.cuda_nvcc is not the set's nvcc in a native build")
        check(cuda, "nvcc-roles", build_cuda.cudaMajorMinorVersion != cuda.cudaMajorMinorVersion,
              "the BUILD set is the HOST set's release")

    def soname_major(package: Any) -> str:
        return str(package.version).split(".")[0]

    return run_command(cuda, config, "nvcc-roles", SCRIPT, {
        "outputs": ["out", "build"],
        "nativeBuildInputs": [cuda.cuda_nvcc],
        "buildInputs": host_inputs,
        "saxpySource": SAXPY,
        "nvccForBuild": build_cuda.cuda_nvcc,
        "buildCudartInclude": lazy(lambda: build_cuda.cuda_cudart.include),
        "buildCudartLib": lazy(lambda: build_cuda.cuda_cudart.lib),
        "buildCudartStatic": lazy(lambda: build_cuda.cuda_cudart.static),
        "buildCublasInclude": lazy(lambda: build_cuda.libcublas.include),
        "buildCublasLib": lazy(lambda: build_cuda.libcublas.lib),
        "buildCccl": build_cuda.cccl,
        "hostMajor": str(cuda.cudaMajorVersion), "buildMajor": str(build_cuda.cudaMajorVersion),
        "hostCudartVersion": cudart_version(cuda), "buildCudartVersion": cudart_version(build_cuda),
        "hostCublasMajor": lazy(lambda: soname_major(cuda.libcublas)),
        "buildCublasMajor": lazy(lambda: soname_major(build_cuda.libcublas)),
        "elfMachine": "AArch64" if system.startswith("aarch64") else "Advanced Micro Devices X86-64",
        "dontStrip": True,
        "removeReferencesTo": [cuda.cuda_nvcc, build_cuda.cuda_nvcc],
        "evaluated": evaluated(checks),
        "meta": gap or meta_of(cuda.cuda_nvcc, build_cuda.cuda_nvcc, *host_inputs),
    })
