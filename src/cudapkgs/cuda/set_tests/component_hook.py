"""tests/component-hook.nix@a4dba9088503c710cced93b04bcfb5df4c92e5fd: redists publish themselves as
CUDA components and a build collects them (hooks/cuda_component.py).

Ported: the main test (cuda_cudart's published metadata: format 3, its component, output,
release and version; a component package made with cudaComponentHook publishes too), and its
tests component-only (cudart alone registers the release, sets no compiler), consumer-not-component
(a consumer publishes nothing), caller-overrides (the caller's CUDACXX and CUDAToolkit_ROOT win;
NIX_CUDA_COMPILER is nvcc) and non-strict (without strictDeps nvcc is still the compiler).
Their failure cases (duplicate-component, incompatible-versions, invalid-compiler) need
Nixpkgs' testBuildFailure, a build that succeeds when another build fails, which cudapkgs has
not: tests/hooks/test_cuda_component.py and tests/test_set_members.py check them instead.
The propagation cases (cudaPropagateDependenciesToOutput, depsBuildBuild, depsTargetTarget)
have no counterpart: those dependency kinds do not exist here.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import run_command

METADATA = """
meta() {  # the value of field $2 in $1/nix-support/cuda-component (JSON written by the hook)
  sed -n "s/.*\\"$2\\": \\([^,}]*\\).*/\\1/p" "$1/nix-support/cuda-component" | tr -d '"'
}
"""


def component_hook(cuda: Any, config: Any, system: str) -> Any:
    """The component-hook test of the set `cuda` (with its ported passthru.tests)."""
    cudart, nvcc = cuda.cuda_cudart, cuda.cuda_nvcc
    mm = cuda.cudaMajorMinorVersion

    def test(suffix: str, script: str, **attrs: Any) -> Any:
        return run_command(cuda, config, "component-hook", script, attrs, suffix=suffix)

    published = test("existing-setup-hook", 'mkdir -p "$out"\n', cudaPublishComponent=True,
                     pname="existing_setup_hook", version="1", cudaMajorMinorVersion=mm,
                     nativeBuildInputs=[cuda.cudaComponentHook])
    component_only = test("component-only", f"""
test -z "${{CUDACXX-}}" && test -z "${{NIX_CUDA_COMPILER-}}"
test "$NIX_CUDA_MAJOR_MINOR_VERSION" = {mm}
touch "$out"
""", buildInputs=[cudart])
    tests = {
        "component-only": component_only,
        # The consumer is an attribute (a package there is an input and reads as its path).
        "consumer-not-component": test("consumer-not-component", """
test ! -e "$consumer/nix-support/cuda-component" && test ! -e "$consumer/nix-support/cudapkgs-setup-hook"
touch "$out"
""", consumer=component_only),
        "caller-overrides": test("caller-overrides", """
test "$CUDACXX" = /caller/cuda-compiler
test "$CUDAToolkit_ROOT" = /caller/cuda-root
test "$NIX_CUDA_COMPILER" = "$nvcc/bin/nvcc"
touch "$out"
""", nativeBuildInputs=[nvcc], nvcc=nvcc, removeReferencesTo=[nvcc], env={"CUDACXX": "/caller/cuda-compiler", "CUDAToolkit_ROOT": "/caller/cuda-root"}),
        "non-strict": test("non-strict", f"""
test "$NIX_CUDA_COMPILER" = "$nvcc/bin/nvcc"
test "$NIX_CUDA_MAJOR_MINOR_VERSION" = {mm}
touch "$out"
""", nativeBuildInputs=[nvcc], buildInputs=[cudart], nvcc=nvcc, removeReferencesTo=[nvcc], strictDeps=False),
    }
    # Paths as attributes: a package or output there is an input and reads as its store path.
    main = run_command(cuda, config, "component-hook", METADATA + f"""
for output in "$cudartOut" "$cudartLib" "$cudartInclude"; do
  test "$(meta "$output" format)" = 3
  test "$(meta "$output" component)" = cuda_cudart
  test "$(meta "$output" cudaMajorMinorVersion)" = {mm}
  test "$(meta "$output" cudaComponentVersion)" = {cudart.version}
done
test "$(meta "$cudartLib" output)" = lib
test "$(meta "$nvcc" compiler)" = bin/nvcc
test "$(meta "$published" component)" = existing_setup_hook
touch "$out"
""", {"buildInputs": [cudart, published], "nativeBuildInputs": [nvcc], "removeReferencesTo": [nvcc],
      # lazily: an output's path evaluates the derivation, which an unfree package refuses
      "cudartOut": lazy(lambda: cudart["out"]), "cudartLib": lazy(lambda: cudart["lib"]),
      "cudartInclude": lazy(lambda: cudart["include"]),
      "nvcc": nvcc, "published": published,
      "passthru": {"tests": AttrSet({k: lazy(lambda v=v: v) for k, v in tests.items()})}})
    return main
