"""tests/nvcc-hook.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb, the parts that apply to this set's nvcc:
in a build with nvcc, a later NVCC_CCBIN reaches the chosen backend compiler (a logging wrapper
sees the call), an explicit ``-ccbin`` wins over NVCC_CCBIN, and a shared library compiled by
nvcc links a build input's library (zlib) through the build's search paths.

Not here: the containment of Nixpkgs' cc-wrapper variables (NIX_CC_WRAPPER_TARGET_*_<salt>,
NIX_BINTOOLS, FC, the Fortran hook), hardening defaults (NIX_HARDENING_ENABLE), Clang's
collector identity and an alternative wrapCCWith backend: Nixpkgs' cc-wrapper and setup.sh
machinery, which the generic builder here does not have. Needs zlib (built from its source,
which the source mirror holds).
"""

from __future__ import annotations

from typing import Any

from .common import first_arch, run_command

SCRIPT = r"""
cat > probe.cu <<'CUDA'
#include <zlib.h>
extern "C" const char* dependencyVersion() { return zlibVersion(); }
__global__ void probe(int* value) { *value = 42; }
CUDA
mkdir backend-override
backend="$(command -v "${NVCC_CCBIN:-c++}")"
printf '#!/bin/sh\nprintf "%%s\\n" "$*" >> "%s/backend.log"\nexec "%s" "$@"\n' "$PWD" "$backend" > backend-override/c++
chmod +x backend-override/c++
NVCC_CCBIN="$PWD/backend-override/c++" nvcc -arch=sm_$arch -E probe.cu -o /dev/null
test -s backend.log || { echo "nvcc ignored NVCC_CCBIN" >&2; exit 1; }
rm backend.log
NVCC_CCBIN=/missing-backend nvcc -ccbin "$PWD/backend-override/c++" -arch=sm_$arch -E probe.cu -o /dev/null
test -s backend.log || { echo "an explicit -ccbin did not win" >&2; exit 1; }
mkdir -p "$out/lib"
nvcc -shared -arch=sm_$arch -Xcompiler=-fPIC --cudart=shared probe.cu -lz -o "$out/lib/probe.so"
readelf -d "$out/lib/probe.so" | grep -F 'Shared library: [libz.so.1]'
"""


def nvcc_hook(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-hook test of the set `cuda`."""
    zlib = cuda.auto_args.get("zlib")
    return run_command(cuda, config, "nvcc-hook", SCRIPT, {
        "nativeBuildInputs": [cuda.cuda_nvcc],
        "buildInputs": [cuda.cuda_cudart] + ([zlib] if zlib is not None else []),
        "arch": first_arch(cuda),
        "removeReferencesTo": [cuda.cuda_nvcc],
    })
