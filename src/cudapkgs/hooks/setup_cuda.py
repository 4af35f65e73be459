"""setupCudaHook: CUDAToolkit_ROOT and CUDAToolkit_INCLUDE_DIR over every marked input, nvcc's host compiler.

Nixpkgs: pkgs/development/cuda-modules/packages/setupCudaHook/setup-cuda-hook.sh
@35ed05daf29b0fb0f2199aa716acf386ab9cded3: every input output holding
``nix-support/include-in-cudatoolkit-root`` (see `mark_for_cudatoolkit_root`)
joins ``CUDAToolkit_ROOT`` (a CMake ``;`` list), its ``include`` joins
``CUDAToolkit_INCLUDE_DIR``, nvcc's prefix joins the root, and
``CUDAHOSTCXX`` names the wrapped C++ compiler.

Where Nixpkgs prepends ``--compiler-bindir`` to ``NVCC_PREPEND_FLAGS``, this
sets ``NVCC_CCBIN`` (nvcc's own variable for the same thing), so an explicit
``-ccbin`` on the command line still wins instead of being an error.  CMake's
``CUDACXX`` names nvcc and ``CUDA_HOME``/``CUDA_PATH`` its prefix, for build
systems that look there.  `cmake_flags` gives the flags the cmake builder adds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .cc_wrapper import find_wrapper
from .mark_for_cudatoolkit_root import MARKER

__all__ = ["cmake_flags", "setup"]


def _nvcc_prefix(paths: list[str]) -> str | None:
    return next((p for p in paths if os.path.isfile(os.path.join(p, "bin", "nvcc"))), None)


def setup(env: dict[str, str], closures: Any, *, base: Mapping[str, str]) -> None:
    """Set the hook's variables in `env` from the input closures (native and host)."""
    roots = [p for p in dict.fromkeys([*closures.host, *closures.native]) if os.path.exists(os.path.join(p, MARKER))]
    nvcc = _nvcc_prefix(closures.native)
    if nvcc is not None and nvcc not in roots:
        roots.append(nvcc)
    if not roots:
        return
    env["CUDAToolkit_ROOT"] = ";".join(roots)
    includes = [os.path.join(p, "include") for p in roots if os.path.isdir(os.path.join(p, "include"))]
    if includes:
        env["CUDAToolkit_INCLUDE_DIR"] = ";".join(includes)
    if nvcc is not None:
        env["CUDACXX"] = os.path.join(nvcc, "bin", "nvcc")
        env["CUDA_HOME"] = env["CUDA_PATH"] = nvcc
        wrapper = find_wrapper(closures.native)
        if wrapper is not None:
            cxx = next(
                (os.path.join(wrapper, "bin", n) for n in ("g++", "clang++") if os.path.exists(os.path.join(wrapper, "bin", n))),
                os.path.join(wrapper, "bin", "c++"),
            )
            if not base.get("CUDAHOSTCXX"):
                env["CUDAHOSTCXX"] = cxx
            if not base.get("NVCC_CCBIN"):
                env["NVCC_CCBIN"] = cxx


def cmake_flags(env: Mapping[str, str]) -> list[str]:
    """The ``-D`` flags setupCudaHook hands CMake (FindCUDAToolkit reads these as cache variables)."""
    flags = []
    for name in ("CUDAToolkit_ROOT", "CUDAToolkit_INCLUDE_DIR"):
        if env.get(name):
            flags.append(f"-D{name}={env[name]}")
    if env.get("CUDAHOSTCXX"):
        flags.append(f"-DCMAKE_CUDA_HOST_COMPILER={env['CUDAHOSTCXX']}")
    return flags
