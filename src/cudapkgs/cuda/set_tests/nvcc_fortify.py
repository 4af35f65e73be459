"""tests/nvcc-fortify.nix@613b8b48f7d48ff70985b390e366975eede57415: nvcc compiles every glibc header
family with `_FORTIFY_SOURCE` in force, a translation unit of headers alone defines no libc
functions, and the program still aborts on a writable `%n` format and on a buffer overflow.

Nixpkgs requests the hardening through its cc-wrapper (`NIX_HARDENING_ENABLE=fortify3`, which the
wrapper turns into `-D_FORTIFY_SOURCE=2` for Clang) on a Clang backend
(`tests.backend-headers.backendCC`). cudapkgs' cc-wrapper has no hardening flags, so the test
passes `-O2 -D_FORTIFY_SOURCE=2` to nvcc itself, with the set's backend compiler. The program links cudart but makes no CUDA call: no GPU is needed.
"""

from __future__ import annotations

from typing import Any

from .common import first_arch, meta_of, run_command

SCRIPT = r"""
mkdir -p "$out"
cat > libc-headers.h <<'CUDA'
#include <arpa/inet.h>
#include <fcntl.h>
#include <mqueue.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>
#include <wchar.h>
CUDA
cat > check.cu <<'CUDA'
#include "libc-headers.h"
#if __USE_FORTIFY_LEVEL != 2
#error expected fortify level 2
#endif
char* (*strcpy_address)(char*, const char*) = &strcpy;
void* (*memcpy_address)(void*, const void*, size_t) = &memcpy;
int (*fprintf_address)(FILE*, const char*, ...) = &fprintf;
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == 'n') {
    char format[] = "%n";
    int n = -1;
    fprintf(stdout, format, &n);
    return n;
  }
  char buffer[8];
  strcpy(buffer, argc > 1 ? argv[1] : "safe");
  fprintf(stdout, "%s\n", buffer);
  return 0;
}
CUDA
compile() {
  nvcc -O2 -D_FORTIFY_SOURCE=2 "$@"
}
echo '#include "libc-headers.h"' > linkage.cu
compile -arch=sm_$arch -c linkage.cu -o linkage.o
# GNU inline wrappers must not define libc functions in every translation unit.
if nm --defined-only linkage.o | grep -E ' [TW] (strcpy|memcpy|fprintf|read|printf)$'; then
  echo "libc functions defined by a header-only unit" >&2; exit 1
fi
compile -arch=sm_$arch --cudart=shared check.cu linkage.o -o "$out/check"
compile -arch=compute_$arch -ptx check.cu -o "$out/saxpy.ptx"
ulimit -c 0
export LIBC_FATAL_STDERR_=1  # glibc writes its fatal messages to the terminal when there is one
test "$("$out/check")" = safe
for argument in n 0123456789abcdef; do
  status=0
  "$out/check" "$argument" > diagnostic 2>&1 || status=$?
  echo "check $argument: status $status: $(cat diagnostic)"
  test "$status" = 134
  case "$argument" in
    n) grep -E '%n in writable segments? detected' diagnostic ;;  # glibc 2.36 says "segment"
    *) grep -F 'buffer overflow detected' diagnostic ;;
  esac
done
"""


def nvcc_fortify(cuda: Any, config: Any, system: str) -> Any:
    """The nvcc-fortify test of the set `cuda` (see the module docstring)."""
    nvcc, cudart = cuda.cuda_nvcc, cuda.cuda_cudart
    return run_command(cuda, config, "nvcc-fortify", SCRIPT, {
        "nativeBuildInputs": [nvcc], "buildInputs": [cudart, cuda.cccl],
        "arch": first_arch(cuda),
        "removeReferencesTo": [nvcc], "meta": meta_of(nvcc, cudart),
    })
