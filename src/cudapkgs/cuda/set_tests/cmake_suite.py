"""tests/cmake/package.nix@1751e37ea785c0b79276bb5b501819eed6dad0bd: CMake's own CUDA test suite
(Tests/Cuda/* and Tests/CudaOnly/* of CMake's source) configured and built with the set's nvcc and
cudart, the build being the check.

The attribute tree is Nixpkgs' (`Cuda.<test>`, `CudaOnly.<test>`), with the same tests marked
broken (and the Clang-only breakages when backendCC is Clang). Nixpkgs builds the tests of its own
cmake's source (`srcOnly cmake.src`), with two patches to cmake itself fetched from
gitlab.kitware.com (FindCUDAToolkit without C/CXX enabled; CUDA 12.8's architectures). Here cmake
is the host's program: the tests come from the source release of the same version, pinned by
sha256 (`SOURCES`: Debian's archive of the upstream tarball), and run with the unpatched host cmake
(CUDAToolkit_ROOT and CUDAToolkit_INCLUDE_DIR from setupCudaHook, as the other CMake tests here).
A host cmake without a pinned source, and a test that its release does not have (CMake 3.25 has no
Cuda/StubRPATH, Cuda/ToolkitBeforeLang, CudaOnly/CUBIN, Fatbin, OptixIR,
SeparateCompilationTargetObjects, TryCompileTargetStatic, Unity), is broken saying so.
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

# cmake version -> (url, sha256, the tests its Tests/Cuda and Tests/CudaOnly hold): the upstream
# release tarball (cmake-<v>.tar.gz) as Debian's archive carries it (cmake_<v>.orig.tar.gz).
SOURCES: dict[str, tuple[str, str, frozenset[str]]] = {
    "3.25.1": (
        "https://deb.debian.org/debian/pool/main/c/cmake/cmake_3.25.1.orig.tar.gz",
        "1c511d09516af493694ed9baf13c55947a36389674d657a2d5e0ccedc6b291d8",
        # tar -tzf: the directories of Tests/Cuda and Tests/CudaOnly (utils/ is shared code, no test)
        frozenset({
            "Cuda/CXXStandardSetTwice", "Cuda/Complex", "Cuda/IncludePathNoToolkit",
            "Cuda/MixedStandardLevels1", "Cuda/MixedStandardLevels2", "Cuda/MixedStandardLevels3",
            "Cuda/MixedStandardLevels4", "Cuda/MixedStandardLevels5", "Cuda/NotEnabled",
            "Cuda/ObjectLibrary", "Cuda/ProperDeviceLibraries", "Cuda/ProperLinkFlags",
            "Cuda/SeparableCompCXXOnly", "Cuda/SharedRuntimePlusToolkit",
            "Cuda/StaticRuntimePlusToolkit", "Cuda/Toolkit", "Cuda/WithC", "CudaOnly/ArchSpecial",
            "CudaOnly/Architecture", "CudaOnly/CircularLinkLine", "CudaOnly/CompileFlags",
            "CudaOnly/DeviceLTO", "CudaOnly/DontResolveDeviceSymbols", "CudaOnly/EnableStandard",
            "CudaOnly/ExportPTX", "CudaOnly/GPUDebugFlag", "CudaOnly/PDB",
            "CudaOnly/ResolveDeviceSymbols", "CudaOnly/RuntimeControls", "CudaOnly/SeparateCompilation",
            "CudaOnly/SeparateCompilationPTX", "CudaOnly/SharedRuntimePlusToolkit",
            "CudaOnly/SharedRuntimeViaCUDAFlags", "CudaOnly/Standard98",
            "CudaOnly/StaticRuntimePlusToolkit", "CudaOnly/Toolkit", "CudaOnly/ToolkitBeforeLang",
            "CudaOnly/ToolkitMultipleDirs", "CudaOnly/WithDefs"
        }),
    ),
}

# Tests of a pinned release that cannot pass with the unpatched host cmake or a newer nvcc, found by
# building them here (CUDA 13.0, cmake 3.25.1): test -> (the oldest CUDA major it fails with, or "", why).
_UNPATCHED = ("needs Nixpkgs' patch to cmake (gitlab.kitware.com/cmake/cmake commit c5d81a24, MR 10354: FindCUDAToolkit "
              "with neither C nor CXX enabled fails in FindThreads); the host's cmake is unpatched")
KNOWN_FAILURES: dict[str, dict[str, tuple[str, str]]] = {
    "3.25.1": {
        "CudaOnly/ExportPTX": ("", _UNPATCHED),
        "CudaOnly/ToolkitMultipleDirs": ("", _UNPATCHED),
        "CudaOnly/Architecture": ("13", "CMake 3.25.1's test builds for sm_52, which nvcc 13 no longer supports (7.5 and newer)"),
        "CudaOnly/CompileFlags": ("13", "CMake 3.25.1's test builds for compute_50, which nvcc 13 no longer supports (7.5 and newer)"),
    },
}

SCRIPT = r"""
tar -xzf "$cmakeSource" "cmake-$cmakeVersion/Tests/$testSuiteName"
cmake -S "cmake-$cmakeVersion/Tests/$testSuiteName/$testName" -B build -G Ninja \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_VERBOSE_MAKEFILE=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$cudaArchitectures" \
  "-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT" "-DCUDAToolkit_INCLUDE_DIR=$CUDAToolkit_INCLUDE_DIR"
cmake --build build
touch "$out"
"""


def cmake(cuda: Any, config: Any, system: str) -> AttrSet:
    """The cmake test: an attribute set of suites, each of CMake's CUDA tests (see the module docstring)."""
    from .common import backend_cc, meta_of

    top = cuda.auto_args
    host_cmake = top.get("cmake")
    tools = [top[name] for name in ("cmake", "ninja") if name in top]
    version = str(host_cmake.version) if host_cmake is not None else ""
    pinned = SOURCES.get(version)

    def test(suite: str, name: str) -> Any:
        state = SUITES[suite][name]
        cc, _ = backend_cc(cuda)
        clang = cc is not None and cc.hostCompiler["kind"] == "clang"
        attrs: dict[str, Any] = {
            "testSuiteName": suite, "testName": name, "cmakeVersion": version,
            "nativeBuildInputs": [*tools, cuda.cuda_nvcc], "buildInputs": [cuda.cuda_cudart, cuda.cccl],
            "cudaArchitectures": cuda.flags.cmakeCudaArchitecturesString,
            "removeReferencesTo": [cuda.cuda_nvcc], "dontFixup": True,
        }
        why = None
        if state == "broken" or (state == "clang" and clang):
            why = f"marked broken in Nixpkgs' cmake test list (tests/cmake/package.nix) for {suite}/{name}"
        elif pinned is None:
            why = (f"no pinned source of the host's cmake {version or '(none found)'} (pinned: {', '.join(SOURCES)}): "
                   f"its Tests/{suite}/{name} cannot be fetched")
        elif f"{suite}/{name}" not in pinned[2]:
            why = f"CMake {version}'s source has no Tests/{suite}/{name} (a newer CMake's test)"
        elif f"{suite}/{name}" in KNOWN_FAILURES.get(version, {}):
            since, reason = KNOWN_FAILURES[version][f"{suite}/{name}"]
            if not since or int(cuda.cudaMajorVersion) >= int(since):
                why = reason
        if why is not None:
            attrs["meta"] = broken_meta(why, description="Generic builder for running CMake tests")
        else:
            url, sha256, _tests = pinned
            attrs["cmakeSource"] = lazy(lambda: top["fetchurl"](url=url, sha256=sha256))
            attrs["meta"] = {"description": "Generic builder for running CMake tests",
                             **meta_of(cuda.cuda_nvcc, cuda.cuda_cudart)}
        return run_command(cuda, config, f"cmake-{suite}-{name}", SCRIPT, attrs)

    return AttrSet({
        suite: lazy(lambda suite=suite: AttrSet(
            {name: lazy(lambda name=name: test(suite, name)) for name in SUITES[suite]},
            name=f"{cuda.attr_path}.tests.cmake.{suite}"))
        for suite in SUITES
    }, name=f"{cuda.attr_path}.tests.cmake")
