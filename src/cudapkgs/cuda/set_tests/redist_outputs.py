"""tests/redist-outputs.nix@613b8b48f7d48ff70985b390e366975eede57415: what a consumer gets from a
redistributable's outputs, through ordinary input propagation.

Ported: a consumer listing cuda_profiler_api reaches its header; `passthru.tests.stubs` links
`-lcuda` against cuda_cudart's stubs output (libcuda.so.1 needed, no stubs directory left in the
RUNPATH, the driver directory there instead); `passthru.tests.propagation` lists
cuda_profiler_api, cuda_cudart and cuda_nvml_dev (each package's default output: mkDerivation
chooses), compiles against all three headers, links cudart shared and static, the driver and NVML
stubs (NVML's where the output has it: NVIDIA's wheel carries none), and checks the propagation edges buildRedist writes (`dev` propagates `out` exactly once,
`out` never `dev`, no output itself; Nixpkgs' countEdge).

Not ported: buildRedist called with caller-chosen output mappings (outputDev/outputInclude/
outputLib = "bin", outputToPatterns, a setupHook using the placeholder of the mapped output) and
cuda_cudart/cuda_nvml_dev with their outputs remapped by override (a `samples` output holding the
stubs and archives), `__structuredAttrs = false`, and NCCL-EP's LDFLAGS with each remapped
runtime: buildRedist here has no output remapping, and there is no unstructured-attributes mode.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import meta_of, run_command

MAIN = r"""
cat > caller.c <<'C'
#if !__has_include(<cudaProfiler.h>)
#error the default input does not reach the declared header output
#endif
int main(void) { return 0; }
C
"$CC" caller.c -o caller
touch "$out"
"""

STUBS = r"""
mkdir -p "$out"
echo 'extern int cuInit(unsigned int); int main(void) { return cuInit(0); }' > caller.c
test -f "$cudartStubs/lib/stubs/libcuda.so"
"$CC" caller.c -L"$cudartStubs/lib/stubs" -lcuda -o "$out/stubs"
readelf -d "$out/stubs" | grep -F 'Shared library: [libcuda.so.1]'
! readelf -d "$out/stubs" | grep -F '/lib/stubs'
"""

PROPAGATION = r"""
mkdir -p "$out"
cat > caller.c <<'C'
#if !__has_include(<cudaProfiler.h>)
#error declared profiler headers are not reachable
#endif
#include <cuda_runtime_api.h>
#include <nvml.h>
int main(void) {
  int version;
  return cudaRuntimeGetVersion(&version);
}
C
"$CC" caller.c -lcudart -o "$out/shared"
"$CC" caller.c -lcudart_static -ldl -lpthread -lrt -o "$out/static"
echo 'extern int cuInit(unsigned int); int main(void) { return cuInit(0); }' > driver.c
"$CC" driver.c -L"$cudartStubs/lib/stubs" -lcuda -o "$out/driver"
printf '#include <nvml.h>\nint main(void) { return nvmlInit_v2(); }\n' > nvml.c
callers=driver
if [ -e "$nvmlStubs/lib/stubs/libnvidia-ml.so" ]; then
  "$CC" nvml.c -L"$nvmlStubs/lib/stubs" -lnvidia-ml -o "$out/nvml"
  callers="driver nvml"
else  # NVIDIA's cuda_nvml_dev wheel has no NVML stub (its nix-support/missing-from-wheel says so)
  echo "no NVML stub in $nvmlStubs: the NVML link is not checked" | tee "$out/nvml-skipped"
fi
for caller in $callers; do
  if [ -n "${CUDAPKGS_DRIVER_DIR:-}" ]; then readelf -d "$out/$caller" | grep -F "$CUDAPKGS_DRIVER_DIR"; fi
  ! readelf -d "$out/$caller" | grep -F '/lib/stubs'
done
countEdge() {
  local from=$1 to=$2 expected=$3 count=0 input
  if [ -f "$from/nix-support/propagated-build-inputs" ]; then
    for input in $(cat "$from/nix-support/propagated-build-inputs"); do
      [ "$input" != "$to" ] || count=$((count + 1))
    done
  fi
  test "$count" = "$expected" || { echo "edge $from -> $to: $count, expected $expected" >&2; exit 1; }
}
for pair in $edges; do
  countEdge "${pair%%=*}" "${pair#*=}" 1
done
for pair in $nonEdges; do
  countEdge "${pair%%=*}" "${pair#*=}" 0
done
"""


def _edges(packages: list[Any]) -> tuple[str, str]:
    """("dev=out …", "out=dev … x=x …"): the edges that must exist once, and those that must not."""
    edges, non_edges = [], []
    for package in packages:
        outputs = list(package.outputs)
        paths = {name: package[name] for name in outputs}
        if "dev" in paths:
            edges.append(f"{paths['dev']}={paths['out']}")
            non_edges.append(f"{paths['out']}={paths['dev']}")
        non_edges += [f"{path}={path}" for path in paths.values()]
    return " ".join(edges), " ".join(non_edges)


def redist_outputs(cuda: Any, config: Any, system: str) -> Any:
    """The redist-outputs test of the set `cuda`, with `passthru.tests.{stubs,propagation}`."""
    profiler, cudart, nvml = cuda.cuda_profiler_api, cuda.cuda_cudart, cuda.cuda_nvml_dev
    packages = [profiler, cudart, nvml]
    meta = meta_of(*packages)
    stubs = lazy(lambda: run_command(cuda, config, "redist-outputs", STUBS, {
        "cudartStubs": cudart.stubs, "meta": meta}, suffix="stubs"))

    def propagation() -> Any:
        edges, non_edges = _edges(packages)
        return run_command(cuda, config, "redist-outputs", PROPAGATION, {
            "buildInputs": packages, "cudartStubs": cudart.stubs, "nvmlStubs": nvml.stubs,
            "edges": edges, "nonEdges": non_edges, "meta": meta,
        }, suffix="propagation")

    return run_command(cuda, config, "redist-outputs", MAIN, {
        "buildInputs": [profiler], "meta": meta,
        "passthru": {"tests": AttrSet({"stubs": stubs, "propagation": lazy(propagation)})},
    })
