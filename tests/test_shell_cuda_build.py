"""Building real CUDA software in `cudapkgs shell` (issue 32), with the real nvcc 13.0 from NVIDIA's wheel.

Downloads through pip (marked `wheels`; deselect with -m "not wheels"); wheels are kept in the test
cache ($CUDAPKGS_TEST_CACHE_HOME, else ~/.cache), the store is fresh.  No GPU: what is checked is what
CMake found and what machine code the library carries (its .nv_fatbin, `cudapkgs.elf.fatbin`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudapkgs.elf.fatbin import sass_capabilities

from conftest import MANIFESTS

pytestmark = [pytest.mark.wheels,
              pytest.mark.skipif(shutil.which("cmake") is None, reason="needs CMake (3.18 or later) on PATH")]

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.18)
project(scale LANGUAGES CXX)
find_package(CUDAToolkit @VERSION@ REQUIRED)
enable_language(CUDA)
add_library(scale SHARED scale.cu)
target_link_libraries(scale PRIVATE CUDA::cudart)
"""
SCALE_CU = """\
__global__ void scale(float *x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
extern "C" int run_scale(float *x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); return 0; }
"""


def _shell(tmp_path: Path, command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDAARCHS", "CUDACXX", "CUDA_HOME", "CUDAToolkit_ROOT")}
    env.update({"CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": str(tmp_path / "store")})
    args = [sys.executable, "-m", "cudapkgs", "shell", "--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]',
            "--set", 'cudaCapabilities=["8.9", "9.0"]', "--set", "cudaForwardCompat=false",
            "cudaPackages_13_0.cuda_nvcc", "cudaPackages_13_0.cuda_cudart", "--command", *command]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=1200)


def test_cmake_cuda_library_with_a_version_checked_toolkit(tmp_path, wheel_cache, require_pypi):
    require_pypi("nvidia-cuda-nvcc")
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(CMAKELISTS.replace("@VERSION@", "13.0"))
    (project / "scale.cu").write_text(SCALE_CU)

    version = _shell(tmp_path, ["nvcc", "--version"], project)
    assert version.returncode == 0, version.stderr[-3000:]
    assert version.stdout.startswith("nvcc: NVIDIA (R) Cuda compiler driver\n")  # not ": NVIDIA …" (issue 32)

    # No CMAKE_CUDA_ARCHITECTURES: the shell's CUDAARCHS (the set's capabilities) is CMake's default.
    built = _shell(tmp_path, ["sh", "-c", "cmake -S . -B b && cmake --build b"], project)
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    assert "The CUDA compiler identification is NVIDIA 13.0." in built.stdout
    cache = (project / "b" / "CMakeCache.txt").read_text()
    assert "CMAKE_CUDA_ARCHITECTURES:STRING=89;90" in cache
    assert sass_capabilities(project / "b" / "libscale.so") == ["8.9", "9.0"]  # exactly the set's, no more

    # A version the set cannot give: CMake's FindCUDAToolkit fails naming the set's.
    (project / "CMakeLists.txt").write_text(CMAKELISTS.replace("@VERSION@", "13.1"))
    shutil.rmtree(project / "b")
    refused = _shell(tmp_path, ["cmake", "-S", ".", "-B", "b"], project)
    assert refused.returncode != 0
    assert 'Found unsuitable version "13.0.' in refused.stderr and 'required is at least "13.1"' in refused.stderr
