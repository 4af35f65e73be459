"""tests/pkg-config.nix@613b8b48f7d48ff70985b390e366975eede57415 and tests/cudart-pkg-config.nix@78570072:
each library's pkg-config module, alone, compiles and links a consumer.

One consumer per module, with only that package as a build input, so its public dependencies
must come through its own propagation: pkg-config must find the module in the package's dev
output (and, for libraries whose headers need CUDA's, the set's cudart module in cudart's),
`--cflags --libs` (and `--static`) must build the consumer with no ambient CPATH or
LIBRARY_PATH, and the NPP base module must no longer advertise the obsolete nppi/nppicom.
Modules of packages unavailable here (cuda_opencl, libcuobjclient, cuda_nvprof) are left out,
as Nixpkgs does. cudart-pkg-config is the cudart consumer; its variants with headers moved to
other outputs need output remapping by override, which cudapkgs' buildRedist does not have.
The .pc files come from NVIDIA's redist tarballs: NVIDIA's PyPI wheels have none, so with
`fetchers = ["wheels"]` these consumers fail (they say which module is missing).
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import dev_output, run_command

# module -> (package attribute, headers, body or symbol, needs cudart's module)
SPECIFICATIONS: dict[str, tuple[str, tuple[str, ...], str, bool]] = {
    "cudart": ("cuda_cudart", ("cuda_runtime.h", "cuda/std/type_traits"),
               "int version; return cudaRuntimeGetVersion(&version);", False),
    "cuda": ("cuda_cudart", ("cuda.h",), "int version; return cuDriverGetVersion(&version);", False),
    "nvidia-ml": ("cuda_nvml_dev", ("nvml.h",), "return nvmlInit_v2();", False),
    "nvrtc": ("cuda_nvrtc", ("nvrtc.h",), "int major, minor; return nvrtcVersion(&major, &minor);", False),
    "nvjitlink": ("libnvjitlink", ("nvJitLink.h",), "unsigned major, minor; return nvJitLinkVersion(&major, &minor);", False),
    "nvfatbin": ("libnvfatbin", ("nvFatbin.h",), "&nvFatbinVersion", False),
    "nvjpeg": ("libnvjpeg", ("nvjpeg.h",), "&nvjpegGetProperty", True),
    "cublas": ("libcublas", ("cublas_v2.h",), "cublasHandle_t handle; return cublasCreate(&handle);", True),
    "cufft": ("libcufft", ("cufftXt.h",), "int version; return cufftGetVersion(&version);", True),
    "cufftw": ("libcufft", ("cufftw.h",), "fftw_cleanup(); return 0;", True),
    "curand": ("libcurand", ("curand.h",), "int version; return curandGetVersion(&version);", True),
    "cusolver": ("libcusolver", ("cusolverDn.h",), "cusolverDnHandle_t h; return cusolverDnCreate(&h);", True),
    "cusparse": ("libcusparse", ("cusparse.h",), "cusparseHandle_t h; return cusparseCreate(&h);", True),
    "nppc": ("libnpp", ("nppcore.h",), "&nppGetLibVersion", True),
    "nppif": ("libnpp", ("nppi_filtering_functions.h",), "&nppiFilter_8u_C1R_Ctx", True),
    "npps": ("libnpp", ("npps_arithmetic_and_logical_operations.h",), "&nppsAdd_32f_Ctx", True),
}

SCRIPT = r"""
{ for h in "${headers[@]}"; do printf '#include <%s>\n' "$h"; done
  case "$body" in
    '&'*) printf 'auto * volatile interfaceSymbol = %s;\nint main() { return interfaceSymbol == nullptr; }\n' "$body" ;;
    *) printf 'int main() { %s }\n' "$body" ;;
  esac
} > consumer.cpp
unset NIX_CFLAGS_COMPILE NIX_LDFLAGS CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH
pcDir="$(pkg-config --variable=pcfiledir "$module")" || { echo "no pkg-config module $module" >&2; exit 1; }
case "$pcDir" in "$packageDev"/lib/pkgconfig|"$packageDev"/share/pkgconfig) ;; *) echo "unexpected $module module: $pcDir" >&2; exit 1 ;; esac
if [ -n "$cudaHeaders" ]; then
  test "$(pkg-config --variable=pcfiledir "cudart-$cudaMajorMinorVersion")" = "$cudartDev/share/pkgconfig"
fi
if [ "$module" = nppc ]; then
  for obsolete in nppi nppicom "nppi-$cudaMajorMinorVersion" "nppicom-$cudaMajorMinorVersion"; do
    if pkg-config --exists "$obsolete"; then echo "obsolete module still advertised: $obsolete" >&2; exit 1; fi
  done
fi
for mode in shared private; do
  options=(); if [ "$mode" = private ]; then options=(--static); fi
  read -r -a flags <<< "$(pkg-config "${options[@]}" --cflags --libs "$module")"
  "$CXX" -std=c++17 consumer.cpp "${flags[@]}" -o "consumer-$mode"
done
mkdir -p "$out/bin"
cp consumer-shared consumer-private "$out/bin/"
"""


def pkg_config(cuda: Any, config: Any, system: str) -> AttrSet:
    """The pkg-config tests of the set `cuda`: one consumer per module (an attribute set)."""
    tool = cuda.auto_args.get("pkg-config")

    def consumer(module: str) -> Any:
        attr, headers, body, cuda_headers = SPECIFICATIONS[module]
        package = cuda[attr]
        return run_command(cuda, config, "pkg-config", SCRIPT, {
            "nativeBuildInputs": [tool] if tool is not None else [],
            "buildInputs": [package],
            "module": module, "headers": list(headers), "body": body, "cudaHeaders": cuda_headers,
            "packageDev": lazy(lambda: dev_output(package)), "cudartDev": lazy(lambda: dev_output(cuda.cuda_cudart)),
            "cudaMajorMinorVersion": cuda.cudaMajorMinorVersion,
            "autoAddDriverRunpath": True,
        }, suffix=module)

    return AttrSet({m: lazy(lambda m=m: consumer(m)) for m in SPECIFICATIONS}, name=f"{cuda.attr_path}.tests.pkg-config")


def cudart_pkg_config(cuda: Any, config: Any, system: str) -> Any:
    """tests/cudart-pkg-config.nix: the cudart consumer of the pkg-config tests."""
    return pkg_config(cuda, config, system).cudart
