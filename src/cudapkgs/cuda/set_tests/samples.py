"""tests/cuda-library-samples.nix@1ac181a1 and tests/cudnn-frontend/{samples,tests,legacy_samples}.nix
(@d1705c65, @dc1fe2c1, @4c53d514): building and running NVIDIA's samples.

cuda-library-samples: Nixpkgs' test builds CUDALibrarySamples at a newer revision (e57b9c48) with a
cuSPARSELt case; here it is the set's own `cuda-library-samples` (cublas, cusolver, cutensor at
5aab6809, the package's revision), whose archive is not reachable from these machines: they
evaluate, building needs the archive. cudnn-frontend: each test runs one of the package's
executables (samples and tests with `--success --rng-seed=0`, legacy_samples) on a GPU
(requiredSystemFeatures cuda); the package is broken here (inputs and patches missing, see its
meta.problems), so these evaluate and are skipped with its reason.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import run_command


def cuda_library_samples(cuda: Any, config: Any, system: str) -> Any:
    """The set's cuda-library-samples packages, as the test's attribute set."""
    samples = cuda["cuda-library-samples"]
    return AttrSet({k: lazy(lambda k=k: samples[k]) for k in ("cublas", "cusolver", "cutensor")},
                   name=f"{cuda.attr_path}.tests.cuda-library-samples")


def cudnn_frontend(cuda: Any, config: Any, system: str) -> AttrSet:
    """tests/cudnn-frontend/*: run the package's samples, tests and legacy samples on a GPU."""
    frontend = cuda["cudnn-frontend"]
    meta = frontend.meta
    runs = {
        "samples": ("samples", "samples", "--success --rng-seed=0"),
        "tests": ("tests", "tests", "--success --rng-seed=0"),
        "legacy_samples": ("legacy_samples", "legacy_samples", "--success --rng-seed=0"),
    }

    def run(name: str) -> Any:
        output, program, args = runs[name]
        return run_command(cuda, config, f"cudnn-frontend-{name}", f'"$program/bin/{program}" {args} > log\n'
                           'install -Dm644 log "$out/log"\n', {
                               "program": lazy(lambda: getattr(frontend, output)),
                               "requiredSystemFeatures": ["cuda"],
                               "meta": {"available": bool(meta.get("available")), "problems": dict(meta.get("problems") or {})},
                           })

    return AttrSet({name: lazy(lambda name=name: run(name)) for name in runs}, name=f"{cuda.attr_path}.tests.cudnn-frontend")
