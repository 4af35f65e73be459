"""tests/backend-headers.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: the backend compiler nvcc uses
(`backendCC`) compiles freestanding C with its own standard headers (stddef, stdint, stdarg,
stdatomic) and the CPU's intrinsics header, syntax only. Nixpkgs runs it with Clang as the
backend; here the backend is the host compiler backendCC chose. No GPU is needed."""

from __future__ import annotations

from typing import Any

from .common import run_command

SCRIPT = r"""
cat > standard.c <<'C'
#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdatomic.h>
_Static_assert(sizeof(uint64_t) == 8, "uint64_t is 64 bits");
int load(atomic_int *value) { return atomic_load(value); }
C
case "$system" in
  x86_64-*) printf '#include <immintrin.h>\n__m128i add(__m128i a, __m128i b) { return _mm_add_epi32(a, b); }\n' > intrinsics.c ;;
  aarch64-*) printf '#include <arm_neon.h>\nint32x4_t add(int32x4_t a, int32x4_t b) { return vaddq_s32(a, b); }\n' > intrinsics.c ;;
esac
for source in standard.c intrinsics.c; do
  "$CC" -std=c17 -ffreestanding -fsyntax-only "$source"
done
touch "$out"
"""


def backend_headers(cuda: Any, config: Any, system: str) -> Any:
    """The backend-headers test of the set `cuda` (stdenv.cc is the set's backendCC)."""
    from .common import backend_cc

    cc, unavailable = backend_cc(cuda)
    return run_command(cuda, config, "backend-headers", SCRIPT, {"stdenvCc": cc, **({"meta": unavailable} if unavailable else {})})
