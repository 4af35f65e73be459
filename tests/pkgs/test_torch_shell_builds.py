"""Building against torch in `cudapkgs shell` (issue 32): a ``torch.utils.cpp_extension`` package through
``pip install --no-build-isolation`` and a ``find_package(Torch)`` CMake project with a CUDA kernel,
in a shell of the CUDA 13.0 set's torch and toolkit, with no GPU.

torch's closure is about 3 GB of wheels, so this runs only when asked (``CUDAPKGS_TEST_TORCH=1``, as
tests/pkgs/test_torch_closure.py) on a machine whose pip reaches a package index.  The store is
``$CUDAPKGS_TEST_TORCH_STORE``, else the user's default store (``~/.local/share/cudapkgs/store``:
realised once, shared with what the user builds); the shell's venv is the test's own.  Compiling
torch's headers takes minutes on two cores.  What is checked: the shell's variables, that the
extension loads and runs its checks (a CPU tensor is refused by its TORCH_CHECK), that every run
path is in the store (no MKL ``/lib/intel64`` from torch's CMake config), and the machine code built
(exactly the set's capabilities, from ``.nv_fatbin``).  The kernel's result on a GPU is
bench/device/check_torch_extension.py's to prove.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudapkgs.elf import read as elf
from cudapkgs.elf.fatbin import sass_capabilities

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_TORCH") != "1",
                       reason="realises torch's 3 GB closure: set CUDAPKGS_TEST_TORCH=1 to run it"),
    pytest.mark.skipif(shutil.which("cmake") is None, reason="needs CMake on PATH"),
]

SOURCES = Path(__file__).resolve().parents[1] / "data" / "torch_builds"
# Read before the autouse fixture points XDG_DATA_HOME at a temporary directory.
STORE = os.environ.get("CUDAPKGS_TEST_TORCH_STORE") or os.path.join(
    os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share"), "cudapkgs", "store")
SET = "cudaPackages_13_0"
PACKAGES = [f"{SET}.pkgs.pkgsCuda.python3Packages.torch"] + [
    f"{SET}.{name}" for name in ("cuda_nvcc", "cuda_cudart", "cuda_cccl", "libcublas", "libcusparse", "libcurand",
                                 "libcusolver", "libcufft", "cuda_nvrtc", "cuda_nvtx")]
CONFIG = ["--set", "allowUnfree=true", "--set", 'fetchers=["wheels"]', "--set", 'prebuiltWheels=["nccl", "libnvshmem"]',
          "--set", 'cudaCapabilities=["9.0"]']


def _shell(script: str, cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    from conftest import MANIFESTS

    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDAARCHS", "TORCH_CUDA_ARCH_LIST", "Torch_DIR", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update({"CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": STORE,
                "CUDAPKGS_SOURCE_MIRRORS": os.environ.get("CUDAPKGS_SOURCE_MIRRORS", str(
                    Path(__file__).resolve().parents[3] / "shared" / "sources"))})
    args = [sys.executable, "-m", "cudapkgs", "shell", *CONFIG, *PACKAGES, "--command", "sh", "-c", script]
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=3600)


def _store_only(path: Path) -> None:
    runpath = elf.read_elf(path).runpath
    assert runpath and all(e.startswith(STORE + "/") for e in runpath), runpath


def test_cpp_extension_through_pip_install_no_build_isolation(tmp_path, require_pypi):
    require_pypi("torch")
    project = tmp_path / "extension"
    shutil.copytree(SOURCES / "extension", project)
    script = (
        'echo "arch=$TORCH_CUDA_ARCH_LIST"; echo "venv=$VIRTUAL_ENV"; '
        "pip install --no-build-isolation --no-deps --disable-pip-version-check . >pip.log 2>&1 || { tail -40 pip.log; exit 1; }; "
        "cd / && python3 -c '"
        "import sys, torch, axpy_ext\n"
        "print(\"ext=\" + axpy_ext.__file__)\n"
        "print(\"hostdist=\" + str(any(\"dist-packages\" in p for p in sys.path)))\n"
        "try:\n"
        "    axpy_ext.axpy(torch.ones(4), torch.ones(4), 2.0)\n"
        "except RuntimeError as error:\n"
        "    print(\"refused=\" + str(error).splitlines()[0])\n'"
    )
    run = _shell(script, project, tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    facts = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line and " " not in line.split("=")[0])
    venv = facts["venv"]
    assert facts["arch"] == "9.0" and venv.startswith(os.environ["XDG_DATA_HOME"])  # the shell's own environment
    assert facts["ext"].startswith(f"{venv}/lib/") and facts["hostdist"] == "False"
    assert "x and y must be CUDA tensors" in facts["refused"]  # the extension's own check ran
    _store_only(Path(facts["ext"]))
    assert sass_capabilities(facts["ext"]) == ["9.0"]


def test_find_package_torch_project_with_a_cuda_kernel(tmp_path, require_pypi):
    require_pypi("torch")
    project = tmp_path / "cmake"
    shutil.copytree(SOURCES / "cmake", project)
    run = _shell('echo "Torch_DIR=$Torch_DIR"; cmake -S . -B b && cmake --build b && { ./b/axpy_main; echo "rc=$?"; }',
                 project, tmp_path)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    assert "-- Found Torch: " + STORE in run.stdout
    torch_dir = next(line.split("=", 1)[1] for line in run.stdout.splitlines() if line.startswith("Torch_DIR="))
    assert torch_dir.startswith(STORE + "/") and torch_dir.endswith("/torch/share/cmake/Torch")
    # torch's config asks for MKL's /lib/intel64 with an empty root: the cc wrapper drops it, saying so.
    assert "/lib/intel64" not in elf.read_elf(project / "b" / "axpy_main").runpath
    _store_only(project / "b" / "axpy_main")
    assert sass_capabilities(project / "b" / "axpy_main") == ["9.0"]
    # No GPU here: the CPU part ran with the store's libtorch, then the program says so (exit 2).
    assert "torch 2.14.1 cpu 16" in run.stdout and "no CUDA device" in run.stdout and "rc=2" in run.stdout
