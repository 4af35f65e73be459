"""tests/cmake/package.nix@1751e37ea785c0b79276bb5b501819eed6dad0bd: CMake's own CUDA test suite
(Tests/Cuda/* and Tests/CudaOnly/* of CMake's source) built with the set's nvcc and cudart.

The attribute tree is Nixpkgs' (`Cuda.<test>`, `CudaOnly.<test>`, with the same tests marked
broken, and the Clang-only breakages when backendCC is Clang). None builds here: the tests are
CMake's source tree (`srcOnly cmake.src` with two patches fetched from gitlab.kitware.com),
and cmake here is the host's program, without its source; no archive of it is in
../shared/sources. Each test says so in `meta.problems`.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import broken_meta, run_command

# suite -> test -> "ok", "broken" (Nixpkgs' isBroken) or "clang" (broken when backendCC is Clang)
SUITES: dict[str, dict[str, str]] = {
    "Cuda": {
        "Complex": "ok", "CXXStandardSetTwice": "ok", "IncludePathNoToolkit": "ok",
        "MixedStandardLevels1": "ok", "MixedStandardLevels2": "ok", "MixedStandardLevels3": "ok",
        "MixedStandardLevels4": "clang", "MixedStandardLevels5": "clang", "NotEnabled": "ok",
        "ObjectLibrary": "ok", "ProperDeviceLibraries": "broken", "ProperLinkFlags": "ok",
        "SeparableCompCXXOnly": "ok", "SharedRuntimePlusToolkit": "broken",
        "StaticRuntimePlusToolkit": "broken", "StubRPATH": "ok", "Toolkit": "broken",
        "ToolkitBeforeLang": "clang", "WithC": "ok",
    },
    "CudaOnly": {
        "Architecture": "ok", "ArchSpecial": "broken", "CircularLinkLine": "ok", "CompileFlags": "ok",
        "CUBIN": "clang", "DeviceLTO": "broken", "DontResolveDeviceSymbols": "ok", "EnableStandard": "ok",
        "ExportPTX": "ok", "Fatbin": "clang", "GPUDebugFlag": "clang", "OptixIR": "clang", "PDB": "broken",
        "ResolveDeviceSymbols": "ok", "RuntimeControls": "ok", "SeparateCompilation": "ok",
        "SeparateCompilationPTX": "broken", "SeparateCompilationTargetObjects": "ok",
        "SharedRuntimePlusToolkit": "broken", "SharedRuntimeViaCUDAFlags": "clang", "Standard98": "clang",
        "StaticRuntimePlusToolkit": "broken", "Toolkit": "broken", "ToolkitBeforeLang": "ok",
        "ToolkitMultipleDirs": "ok", "TryCompileTargetStatic": "ok", "Unity": "ok", "WithDefs": "ok",
    },
}

NO_SOURCE = ("needs CMake's source tree (Tests/{suite}/{test}; Nixpkgs: srcOnly cmake.src): cmake here is the "
             "host's program, without its source, and no CMake archive is in the source mirror")


def cmake(cuda: Any, config: Any, system: str) -> AttrSet:
    """The cmake test: an attribute set of suites, each of CMake tests (all unavailable here)."""

    def test(suite: str, name: str) -> Any:
        state = SUITES[suite][name]
        from .common import backend_cc

        cc, _ = backend_cc(cuda)
        clang = cc is not None and cc.hostCompiler["kind"] == "clang"
        message = NO_SOURCE.format(suite=suite, test=name)
        if state == "broken" or (state == "clang" and clang):
            message = f"marked broken in Nixpkgs' cmake test list; and it {message}"
        return run_command(cuda, config, f"cmake-{suite}-{name}", 'touch "$out"\n', {
            "nativeBuildInputs": [cuda.cuda_nvcc], "buildInputs": [cuda.cuda_cudart],
            "meta": broken_meta(message, description="Generic builder for running CMake tests"),
        })

    return AttrSet({
        suite: lazy(lambda suite=suite: AttrSet(
            {name: lazy(lambda name=name: test(suite, name)) for name in SUITES[suite]},
            name=f"{cuda.attr_path}.tests.cmake.{suite}"))
        for suite in SUITES
    }, name=f"{cuda.attr_path}.tests.cmake")
