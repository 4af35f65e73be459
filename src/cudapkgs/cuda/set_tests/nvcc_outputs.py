"""tests/nvcc-outputs.nix@f8ad15116d83bd5d6be2dc98198ce690a3546db7 and
tests/nvcc-data-outputs.nix@613b8b48f7d48ff70985b390e366975eede57415: nvcc used through the output a
consumer names, and the installed compiler working outside any setup hook ("standalone").

nvcc-outputs: a consumer lists nvcc's output directly; `CUDACXX` is that output's `bin/nvcc` and
`CUDAToolkit_ROOT` holds it, a CUDA source including a build input's header (zlib) compiles and
links `-lz`, the installed nvcc makes a static library (`-lib`, its private `ar`) with a clean
environment (no setup hook variables: only PATH to the backend compiler), and a shared one.
`passthru.tests.direct-bin` is the same build with nvcc propagated by an intermediate package
(Nixpkgs' producer with a `cxxdev` output) instead of listed.

nvcc-data-outputs: with only nvcc (no cudart, cccl or crt among the inputs), the installed
compiler finds its own CUDA runtime headers, `crt/host_config.h` (through its `include/crt`) and
cccl's headers, and links `--cudart=shared` and `-lcuda`, from a clean environment (`env -i`: no
setup hook, no `-I`/`-L` from anyone): what its `nvcc.profile` names by store path (cudart's include,
stubs and lib outputs, crt, cccl: `cudapkgs.realise.nvcc`) must be enough, as Nixpkgs' profile is
(cuda_nvcc/package.nix@7787668e). The program must need the set's own `libcudart.so.<major>` and
`libcuda.so.1`.

Not ported: Nixpkgs remaps nvcc's, cudart's, crt's, cccl's and libnvptxcompiler's outputs by
override (`outputs = ["out" "bin"]`, outputToPatterns) and checks the compiler follows; buildRedist
here has no output remapping, so the outputs are the set's own. The CUDA 12 part (`nvPTXCompiler.h`
and `-lnvptxcompiler_static` from nvcc's own prefix) is kept: nvcc links libnvptxcompiler's below 13.0.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import first_arch, meta_of, run_command

SAXPY = r"""
cat > saxpy.cu <<'CUDA'
#include <cuda/std/type_traits>
#ifdef TEST_ZLIB
#include <zlib.h>
extern "C" const char* dependencyVersion() { return zlibVersion(); }
#endif
__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" int runSaxpy(int n, float a, const float *x, float *y) {
  saxpy<<<(n + 255) / 256, 256>>>(n, a, x, y);
  return cudaDeviceSynchronize();
}
CUDA
"""

# A clean environment: what an installed compiler run by hand (or by a JIT) sees.
STANDALONE = r"""
standalone() {
  env -i PATH="$(dirname "$(command -v "${NVCC_CCBIN:-c++}")"):/usr/bin:/bin" HOME="$TMPDIR" TMPDIR="$TMPDIR" "$@"
}
"""

OUTPUTS = SAXPY + STANDALONE + r"""
test "$CUDACXX" = "$nvcc/bin/nvcc"
case ";$CUDAToolkit_ROOT;" in *";$nvcc;"*) ;; *) echo "CUDAToolkit_ROOT lacks nvcc: $CUDAToolkit_ROOT" >&2; exit 1 ;; esac
mkdir -p "$out"
"$CUDACXX" -c -DTEST_ZLIB -arch=sm_$arch -Xcompiler=-fPIC saxpy.cu -o saxpy.o
"$CUDACXX" -shared -arch=sm_$arch --cudart=shared saxpy.o -lz -o "$out/with-zlib.so"
readelf -d "$out/with-zlib.so" | grep -F 'Shared library: [libz.so.1]'
standalone "$nvcc/bin/nvcc" -lib -arch=sm_$arch saxpy.o -o "$out/libsaxpy.a"
"$nvcc/bin/nvcc" -shared -arch=sm_$arch -Xcompiler=-fPIC --cudart=shared saxpy.cu -o "$out/saxpy.so"
"""

DATA_OUTPUTS = STANDALONE + r"""
mkdir -p "$out"
test -f "$nvcc/include/crt/host_config.h"
cat > saxpy.cu <<'CUDA'
#include <cuda_runtime.h>
#include <cuda/std/type_traits>
#if __CUDACC_VER_MAJOR__ < 13
#include <nvPTXCompiler.h>
#endif
static_assert(cuda::std::is_integral_v<int>);
extern "C" int cuInit(unsigned int);
__global__ void saxpy(float a, const float* x, float* y) {
  int i = threadIdx.x;
  y[i] = a * x[i] + y[i];
}
int main() {
  int result = cuInit(0) + cudaDeviceSynchronize();
#if __CUDACC_VER_MAJOR__ < 13
  unsigned int major, minor;
  result += nvPTXCompilerGetVersion(&major, &minor);
#endif
  return result;
}
CUDA
ptx=
if [ "$cudaMajor" -lt 13 ]; then ptx="-L$nvcc/lib -lnvptxcompiler_static"; fi
standalone "$nvcc/bin/nvcc" -arch=sm_$arch --cudart=shared saxpy.cu -lcuda $ptx -o "$out/check"
readelf -d "$out/check" | grep -F "Shared library: [libcudart.so.$cudaMajor]"
readelf -d "$out/check" | grep -F 'Shared library: [libcuda.so.1]'
"""


def nvcc_outputs(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-outputs test of the set `cuda`, with `passthru.tests.direct-bin`."""
    from ...stdenv import mk_derivation

    nvcc, cudart = cuda.cuda_nvcc, cuda.cuda_cudart
    zlib = cuda.auto_args.get("zlib")
    libraries = [cudart, cuda.cccl] + ([zlib] if zlib is not None else [])
    common = {"arch": first_arch(cuda), "nvcc": nvcc, "removeReferencesTo": [nvcc], "meta": meta_of(nvcc, *libraries)}
    direct = run_command(cuda, config, "nvcc-outputs", OUTPUTS, {
        "nativeBuildInputs": [nvcc], "buildInputs": libraries, **common}, suffix="bin")

    def producer() -> Any:  # a package that propagates nvcc to whoever lists it (Nixpkgs' producer.cxxdev)
        return mk_derivation(config, {
            "name": f"{cuda.cudaNamePrefix}-tests-nvcc-outputs-producer",
            "propagatedNativeBuildInputs": [nvcc],
            # listed as its own input too: cudapkgs refuses an output referring to nvcc reached only
            # as a build tool (realise/generic._check_no_nvcc); here propagating it is the point.
            "buildInputs": [nvcc],
            "dontUnpack": True, "dontConfigure": True, "dontBuild": True, "dontFixup": True,
            "installPhase": 'mkdir -p "$out"\n',
        }, system=cuda.backendStdenv.hostNixSystem, name=f"{cuda.attr_path}.tests.nvcc-outputs.producer")

    return run_command(cuda, config, "nvcc-outputs", OUTPUTS, {
        "buildInputs": [lazy(producer), *libraries], **common,
        "passthru": {"tests": AttrSet({"direct-bin": lazy(lambda: direct)})},
    })


def nvcc_data_outputs(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-data-outputs test of the set `cuda` (tests/nvcc-data-outputs.nix@85b7ecdd): the
    installed nvcc alone, run with an empty environment, compiles and links a program against its
    set's cudart, crt and cccl. Unavailable (saying why) where nvcc is: CUDA 12 from wheels only."""
    from .common import wheels_lack_nvcc

    nvcc = cuda.cuda_nvcc
    return run_command(cuda, config, "nvcc-data-outputs", DATA_OUTPUTS, {
        "nvcc": nvcc, "arch": first_arch(cuda), "cudaMajor": str(cuda.cudaMajorVersion),
        "nativeBuildInputs": [nvcc], "removeReferencesTo": [nvcc],
        # Nixpkgs' test is a buildCommand (no fixup): the program is not run, and its libcudart is
        # nvcc's own set's, reached through the profile, not an input autoPatchelf could search.
        "dontFixup": True,
        "meta": wheels_lack_nvcc(cuda, config) or meta_of(nvcc),
    })
