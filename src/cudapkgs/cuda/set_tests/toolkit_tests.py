"""tests/cudatoolkit.nix and tests/nvcc-discovery.nix (@1dbbce67809cafa79ee16b2100ac05ebd23e267b): the
merged `cudatoolkit` compiles CUDA as the only input, and a build finds nvcc where it should.

nvcc-discovery's cases here: library-only (cuda_cudart as the only input: no CUDACXX,
CUDAHOSTCXX or NVCC_CCBIN, and a C++ program links -lcudart; CUDAToolkit_ROOT is set here, as the
setupCudaHook this set follows sets it from every marked input, setup-cuda-hook.sh@35ed05da,
where Nixpkgs' newer component hook leaves it to a compiler), caller-overrides
(the derivation's own CUDACXX, CUDAHOSTCXX, CUDAToolkit_ROOT win), ccbin-override (a caller's
NVCC_CCBIN wins) and aggregate (cudatoolkit as a native input gives CUDACXX). Not here: the
strict-roles case (depsBuildBuild, depsBuildTarget, depsHostHost, depsTargetTarget: dependency
kinds cudapkgs does not have) and NVCC_PREPEND_FLAGS/dontCompressCudaFatbins (Nixpkgs' nvcc
setup hook's own variables). cudatoolkit.nix also links libnvptxcompiler_static, which this
set's cudatoolkit does not join (cudatoolkit.nix@de32314a's component list). With
`fetchers = ["wheels"]` cudatoolkit and the aggregate case fail at plan time: cuda_gdb and
cuda_nvprune, which cudatoolkit joins, have no PyPI wheel.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import first_arch, run_command

SAXPY = r"""
cat > saxpy.cu <<'CUDA'
#include <cuda/std/type_traits>
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
CUDA
mkdir -p "$out"
"$CUDACXX" -shared -arch=sm_$arch -Xcompiler=-fPIC --cudart=shared saxpy.cu -o "$out/saxpy.so"
"$CUDACXX" -ptx -arch=compute_$arch saxpy.cu -o "$out/saxpy.ptx"
"""

LIBRARY_ONLY = r"""
test -z "${CUDACXX-}${CUDAHOSTCXX-}${NVCC_CCBIN-}"
cat > runtime.cpp <<'CPP'
#include <cuda_runtime.h>
int main() { int version = 0; return cudaRuntimeGetVersion(&version) != cudaSuccess; }
CPP
mkdir -p "$out"
"$CXX" runtime.cpp -lcudart -o "$out/runtime"
"$out/runtime"
"""


def cudatoolkit(cuda: Any, config: Any, system: str) -> Any:
    """tests/cudatoolkit.nix: nvcc from the merged toolkit, with the toolkit as the only input."""
    return run_command(cuda, config, "cudatoolkit", SAXPY, {
        "nativeBuildInputs": [cuda.cudatoolkit], "buildInputs": [cuda.cudatoolkit], "arch": first_arch(cuda),
        "removeReferencesTo": [cuda.cudatoolkit, cuda.cuda_nvcc], "dontFixup": True,
    })


def nvcc_discovery(cuda: Any, config: Any, system: str) -> Any:
    """tests/nvcc-discovery.nix's cases that apply here (see the module docstring)."""
    nvcc, cudart = cuda.cuda_nvcc, cuda.cuda_cudart

    def case(name: str, script: str, **attrs: Any) -> Any:
        return run_command(cuda, config, "nvcc-discovery", script, attrs, suffix=name)

    tests = {
        "library-only": case("library-only", LIBRARY_ONLY, buildInputs=[cudart], autoAddDriverRunpath=True),
        "caller-overrides": case("caller-overrides", """
test "$CUDACXX" = /caller/cuda-compiler && test "$CUDAHOSTCXX" = /caller/host-compiler
test "$CUDAToolkit_ROOT" = /caller/cuda-root
touch "$out"
""", nativeBuildInputs=[nvcc], env={"CUDACXX": "/caller/cuda-compiler", "CUDAHOSTCXX": "/caller/host-compiler",
                                    "CUDAToolkit_ROOT": "/caller/cuda-root"}),
        "ccbin-override": case("ccbin-override", 'test "$NVCC_CCBIN" = /caller/host-compiler\ntouch "$out"\n',
                               nativeBuildInputs=[nvcc], env={"NVCC_CCBIN": "/caller/host-compiler"}),
        "aggregate": case("aggregate", 'test "$(readlink -f "$CUDACXX")" = "$(readlink -f "$nvcc/bin/nvcc")"\n'
                          '"$CUDACXX" --version\ntouch "$out"\n', nativeBuildInputs=[cuda.cudatoolkit], nvcc=nvcc),
    }
    return run_command(cuda, config, "nvcc-discovery", """
test "$CUDACXX" = "$nvcc/bin/nvcc"
"$CUDACXX" --version
touch "$out"
""", {"nativeBuildInputs": [nvcc], "buildInputs": [cudart], "nvcc": nvcc,
      "passthru": {"tests": AttrSet({k: lazy(lambda v=v: v) for k, v in tests.items()})}})
