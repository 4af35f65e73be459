"""tests/nvcc-runtime.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b (with its nvcc-math.cu@613b8b48):
the set's nvcc compiles CUDA C++ for the first requested capability in C++17 and C++20, the
host-side math and C++ standard library checks run, and PTX, cubin and shared-library output
work; `passthru.tests.gpu` (requiredSystemFeatures cuda) runs the device math on a GPU.

The math program is cudapkgs' own (same checks: std::pow's promotion rules, isfinite/isinf/
isnan/signbit classification on host and device, a kernel whose results must all be written).
Not ported: Nixpkgs runs nvcc "standalone" (no setup hook; its nvcc.profile finds cudart and
cccl itself) and checks its NIX_LDFLAGS channels, driver RUNPATH order and nested-nvcc profile
handling, all properties of Nixpkgs' nvcc wrapper; here the build's inputs (cuda_cudart, cccl)
give the search paths, as for any package built with this nvcc.
"""

from __future__ import annotations

from typing import Any

from .common import first_arch, run_command

MATH = r"""
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(std::is_same<decltype(std::pow(2.0f, 3)), double>::value, "float^int promotes to double");
static_assert(std::is_same<decltype(std::pow(2.0f, 3.0f)), float>::value, "float^float stays float");

template <class T> __host__ __device__ int kind(T x) {
  return (::isfinite(x) ? 1 : 0) | (::isinf(x) ? 2 : 0) | (::isnan(x) ? 4 : 0) | (::signbit(x) ? 8 : 0);
}

__global__ void compute(double *out, int *kinds, float x, double y, int n) {
  out[0] = ::pow(x, n);
  out[1] = ::pow(static_cast<double>(x), y);
  out[2] = ::sqrt(16.0f) + ::cos(0.0);
  const float in[] = {0.0f, -1.0f, INFINITY, NAN};
  for (int i = 0; i < 4; ++i) kinds[i] = kind(in[i]) + 16 * kind(static_cast<double>(in[i]));
}

int main(int argc, char **argv) {
  const float in[] = {0.0f, -1.0f, INFINITY, NAN};
  const int want[] = {1, 9, 2, 4};
  for (int i = 0; i < 4; ++i)
    if (kind(in[i]) != want[i] || kind(static_cast<double>(in[i])) != want[i]) return 1;
  if (std::pow(2.0f, 3) != 8.0 || std::pow(2, 3.0f) != 8.0) return 1;
  if (argc == 2 && std::strcmp(argv[1], "--host-only") == 0) return 0;
  double *out; int *kinds;
  if (cudaMallocManaged(&out, 3 * sizeof(double)) != cudaSuccess) return 2;
  if (cudaMallocManaged(&kinds, 4 * sizeof(int)) != cudaSuccess) return 2;
  for (int i = 0; i < 3; ++i) out[i] = -1.0;
  compute<<<1, 1>>>(out, kinds, 2.0f, 3.0, 3);
  if (cudaDeviceSynchronize() != cudaSuccess) return 3;
  const double expect[] = {8.0, 8.0, 5.0};
  for (int i = 0; i < 3; ++i) if (out[i] != expect[i]) { std::fprintf(stderr, "out[%d] = %g\n", i, out[i]); return 4; }
  for (int i = 0; i < 4; ++i) if (kinds[i] != want[i] * 17) { std::fprintf(stderr, "kinds[%d] = %d\n", i, kinds[i]); return 5; }
  std::printf("device math: ok\n");
  return 0;
}
"""

STDLIB = r"""
#include <cmath>
#include <iostream>
#include <string>
int main(int argc, char **argv) {
  std::string message = argc == 2 ? argv[1] : "";
  message.append(" stdlib");
  double value = std::sqrt(9.0) + std::pow(2.0, 3.0);
  std::cout << message << " " << value << "\n";
  return message != "NVCC stdlib" || value != 11.0;
}
"""

SAXPY = r"""
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" int runSaxpy(int n, float a, const float *x, float *y) {
  saxpy<<<(n + 255) / 256, 256>>>(n, a, x, y);
  return cudaDeviceSynchronize();
}
"""

SCRIPT = """
mkdir -p "$out"
printf '%s' "$mathSource" > math.cu
printf '%s' "$stdlibSource" > stdlib.cu
printf '%s' "$saxpySource" > saxpy.cu
for standard in 17 20; do
  nvcc -std=c++$standard -arch=sm_$arch math.cu -o "$out/math-c++$standard"
  nvcc -std=c++$standard -arch=sm_$arch stdlib.cu -o "$out/stdlib-c++$standard"
  "$out/math-c++$standard" --host-only
  test "$("$out/stdlib-c++$standard" NVCC)" = "NVCC stdlib 11"
done
nvcc -ptx -arch=compute_$arch saxpy.cu -o "$out/saxpy.ptx"
grep -q '.entry saxpy' "$out/saxpy.ptx"
nvcc -cubin -arch=sm_$arch saxpy.cu -o "$out/saxpy.cubin"
nvcc -shared -arch=sm_$arch -Xcompiler=-fPIC --cudart=shared saxpy.cu -o "$out/saxpy.so"
"""


def nvcc_runtime(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-runtime test of the set `cuda` (and its GPU check in passthru.tests.gpu)."""
    main = run_command(cuda, config, "nvcc-runtime", SCRIPT, {
        "nativeBuildInputs": [cuda.cuda_nvcc],
        "buildInputs": [cuda.cuda_cudart, cuda.cccl],
        "arch": first_arch(cuda),
        "mathSource": MATH, "stdlibSource": STDLIB, "saxpySource": SAXPY,
        "autoAddDriverRunpath": True,
        "removeReferencesTo": [cuda.cuda_nvcc],
    })
    gpu = run_command(cuda, config, "nvcc-runtime", '"$runtime/math-c++17" > log && "$runtime/math-c++20" >> log\n'
                      'install -Dm644 log "$out/log"\n',
                      {"runtime": main, "requiredSystemFeatures": ["cuda"]}, suffix="gpu")
    return main.override_attrs({"passthru": {"tests": {"gpu": gpu}}})
