"""tests/backend-stdenv.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: backendStdenv keeps the
constructor interface adapters use, and its compiler is the set's `backendCC`.

Nixpkgs asserts while evaluating that ``backendStdenv.override { cc = null; hasCC = false; }``
has no compiler, that `overrideCC` restores one, that `withDefaultHardeningFlags` and
`replaceStdenv` accept it, and that ``backendStdenv.cc`` is ``backendCC``. Here backendStdenv is a
set of attributes with `cc`, `hasCC` and `override` (cuda/backend_stdenv.with_compiler), so the
same assertions are made on those; the adapters themselves (`overrideCC`,
`withDefaultHardeningFlags`, `replaceStdenv` of a whole package tree) do not exist here. Added:
the compiler is one this release's nvcc accepts (nvcc.toml, Nixpkgs' nvccCompatibilities), and a
build whose stdenv.cc is backendStdenv.cc compiles with that very compiler (its version macro).
"""

from __future__ import annotations

from typing import Any

from ... import db
from .common import check, evaluated, run_command

TEST = "backend-stdenv"

SCRIPT = r"""
cat > identity.cpp <<'CPP'
#if defined(__clang__)
#define FAMILY "clang"
#define MAJOR __clang_major__
#else
#define FAMILY "gcc"
#define MAJOR __GNUC__
#endif
#include <cstdio>
int main() { std::printf("%s %d\n", FAMILY, MAJOR); return 0; }
CPP
"$CXX" identity.cpp -o identity
test "$(./identity)" = "$ccKind $ccMajor"
mkdir -p "$out"
echo "backendStdenv.cc: $(./identity)" > "$out/log"
"""


def backend_stdenv(cuda: Any, config: Any, system: str) -> Any:
    """The backend-stdenv test of the set `cuda`: evaluation assertions, then a build with
    backendStdenv's compiler. Unavailable (with the reason) when the host has no compiler this
    release's nvcc accepts."""
    from .common import backend_cc

    stdenv = cuda.backendStdenv
    cc, unavailable = backend_cc(cuda)
    if cc is None:
        return run_command(cuda, config, TEST, 'touch "$out"\n', {"meta": unavailable})
    host = dict(cc.hostCompiler)

    def checks() -> None:
        no_cc = stdenv.override(cc=None, hasCC=False)
        check(cuda, TEST, not no_cc.hasCC and no_cc.cc is None, "backendStdenv.override(cc=None) kept a compiler")
        restored = no_cc.override(cc=cc)
        check(cuda, TEST, restored.hasCC and restored.cc.drvPath == cc.drvPath,
              "overriding cc back did not restore backendCC")
        check(cuda, TEST, stdenv.hasCC and stdenv.cc.drvPath == cc.drvPath, "backendStdenv.cc is not backendCC")
        check(cuda, TEST, list(no_cc.cudaCapabilities) == list(stdenv.cudaCapabilities),
              "override lost backendStdenv's capabilities")
        accepted = db.nvcc_compatibilities()[cuda.cudaMajorMinorVersion][host["kind"]]
        low, high = int(accepted["minMajorVersion"]), int(accepted["maxMajorVersion"])
        check(cuda, TEST, low <= int(host["major"]) <= high,
              f"backendCC is {host['kind']} {host['major']}, nvcc {cuda.cudaMajorMinorVersion} accepts "
              f"{host['kind']} {low} to {high}")

    return run_command(cuda, config, TEST, SCRIPT, {
        "stdenvCc": cc, "ccKind": "clang" if host["kind"] == "clang" else "gcc", "ccMajor": str(host["major"]),
        "evaluated": evaluated(checks),
    })
