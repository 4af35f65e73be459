"""saxpy: `y = a*x + y` from one source, built by nvcc for `flags.gencode`, or by g++.

With CUDA (cudaSupport, else config.cudaSupport) it is nvcc from nativeBuildInputs
compiling for the set's `flags.gencode`, linked against the shared cudart of
buildInputs; the fixup's RUNPATH points at cudart's store path and the driver dir,
and nvcc's store path is scrubbed from the binary, so the run-time closure is
saxpy and cudart's lib output.
Without, the same source is compiled as C++ for the CPU.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from ...stdenv import DerivationPackage, mk_derivation

SOURCE = os.path.join(os.path.dirname(__file__), "saxpy.cu")  # a local source (pathlib: `_source`)


def _source() -> Any:
    from pathlib import Path

    return Path(SOURCE)


INSTALL = 'install -Dm755 saxpy "$out/bin/saxpy"'


def saxpy(cudaPackages: Any, config: Any, system: str | None = None, cudaSupport: bool | None = None) -> DerivationPackage:
    """The saxpy package of a package tree (callPackage'd at the top level)."""
    cuda_support = config.cudaSupport if cudaSupport is None else cudaSupport

    def attrs(final: AttrSet) -> dict[str, Any]:
        common = {
            "pname": "saxpy",
            "version": "1.0",
            "src": lazy(_source),  # a Path, as before; pathlib imported when it is read
            "cudaSupport": cuda_support,
            "installPhase": INSTALL,
            "passthru": {"tests": lazy(lambda: _tests(final, config, system, cuda_support))},
            "meta": {
                "description": "y = a*x + y, checked against a CPU reference"
                + (" (CUDA)" if cuda_support else " (CPU)"),
                "mainProgram": "saxpy",
            },
        }
        if not cuda_support:
            return {**common, "buildPhase": 'g++ -O2 -x c++ -o saxpy "$src_file"', "env": {"src_file": os.path.basename(SOURCE)}}
        return {
            **common,
            "nativeBuildInputs": [cudaPackages.cuda_nvcc],
            "buildInputs": [cudaPackages.cuda_cudart, cudaPackages.cuda_cccl],
            "gencode": list(cudaPackages.flags.gencode),
            "cudaCapabilities": list(cudaPackages.flags.cudaCapabilities),
            "autoAddDriverRunpath": True,
            # nvcc writes its own -L dirs into the fatbinary's link options; without
            # this, all of nvcc (~250 MiB) would be in saxpy's run-time closure.
            "removeReferencesTo": [cudaPackages.cuda_nvcc],
            "disallowedReferences": [cudaPackages.cuda_nvcc],
            "buildPhase": 'nvcc "${gencode[@]}" -O2 -cudart shared -o saxpy "$src_file"',
            "env": {"src_file": os.path.basename(SOURCE)},
        }

    return mk_derivation(config, attrs, system=system, name="saxpy")


def _tests(final: AttrSet, config: Any, system: str | None, cuda_support: bool) -> dict[str, Any]:
    """Run saxpy on 2^20 elements; it exits non-zero when its result is wrong, failing the build."""
    run = mk_derivation(
        config,
        {
            "pname": "saxpy-test-run",
            "version": final.version,
            "nativeBuildInputs": [final.derivation],
            "buildPhase": "saxpy 1048576 > log; cat log",
            "installPhase": 'install -Dm644 log "$out/log"',
            # On a GPU only: Nixpkgs keeps CUDA-only tests under tests.cuda.
            **({"requiredSystemFeatures": ["cuda"]} if cuda_support else {}),
            "meta": {"description": "saxpy's result checked against the CPU"},
        },
        system=system,
        name="saxpy.tests.run",
    )
    return {"cuda": {"run": run}} if cuda_support else {"run": run}
