"""One CUDA in torch's closure, proven without a GPU (issue 20, part 6): the CUDA 13.0 set's torch and the
default CUDA 12.9 set's, on CPython 3.11 and 3.12 (triton's ptxas from cuda_nvcc_wheel: CUDA 12's nvcc wheel has no nvcc) realised
from NVIDIA's and PyTorch's wheels, then checked as a user would run it, in ``env -i``.

The closure is about 3 GB of wheels (5.4 GB installed), so the test runs only when asked
(``CUDAPKGS_TEST_TORCH=1``) on a machine whose pip reaches a package index, and keeps its store and
wheel cache in the test cache (``$CUDAPKGS_TEST_CACHE_HOME``, else ``~/.cache``): a second run only
checks.  rdma-core (libcufile's and NVSHMEM's InfiniBand libraries) comes through apt-get, zlib
(triton's) from a source mirror or GitHub.
"""

from __future__ import annotations

import os
import shutil

import pytest

from cudapkgs.leakage import check_leakage
from cudapkgs.lib.attrpath import parse_attrpath

from closure_checks import (  # tests/pkgs is on sys.path (rootdir conftest)
    DRIVER, check_closure, cuda_libraries_mapped, decoy_path, inside, ml_test_store, realised_env, run_in_env_i)

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_TORCH") != "1",
                       reason="realises torch's 3 GB closure: set CUDAPKGS_TEST_TORCH=1 to run it"),
    pytest.mark.skipif(shutil.which("apt-get") is None, reason="rdma-core comes through apt-get (Debian/Ubuntu)"),
]

# case -> (set, Python scope, store name, torch.__version__, torch.version.cuda (the build's), cudart soname,
#          the decoy tree torch's preload would have searched: nvidia/cu13/lib (2.14.1), nvidia/<library>/lib (2.9.1)).
SETS = {
    "cudaPackages_13_0": ("cudaPackages_13_0", "python3Packages", "torch-cu130", "2.14.1+cu130", "13.0",
                          "libcudart.so.13", ("cu13", "cu13")),
    "cudaPackages_12_9": ("cudaPackages_12_9", "python3Packages", "torch-cu129", "2.9.1+cu128", "12.8",
                          "libcudart.so.12", ("cuda_runtime", "cublas")),
    "cudaPackages_12_9-cp312": ("cudaPackages_12_9", "python312Packages", "torch-cu129", "2.9.1+cu128", "12.8",
                                "libcudart.so.12", ("cuda_runtime", "cublas")),
}
SCRIPT = r"""
import json, sys
import torch
out = {"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
       "available": torch.cuda.is_available()}
try:
    torch.cuda.init()
except Exception as error:
    out["init"] = f"{type(error).__name__}: {error}"
a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
out["matmul"] = (a @ a.T).tolist()


@torch.compile
def f(x, y):
    return torch.sin(x) + torch.cos(y)


x, y = torch.randn(10, 10), torch.randn(10, 10)
out["compiled"] = bool(torch.allclose(f(x, y), torch.sin(x) + torch.cos(y), atol=1e-6))
out["maps"] = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})

# triton to a cubin for sm_90 with the set's ptxas, no GPU needed (an explicit target).
import os, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


source = ASTSource(fn=axpy, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                       "BLOCK": "constexpr"}, constexprs={"BLOCK": 1024})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32))
out["cubin"] = len(kernel.asm["cubin"])
out["ptxas"] = os.path.realpath(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas"))
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module", params=list(SETS))
def realised(request):
    """(pkgs, store dir, withPackages env path, torch package, closure, set name) with the closure
    realised (cached)."""
    from conftest import _pip_reaches_index

    if not _pip_reaches_index("torch"):
        pytest.skip("pip cannot reach its package index")
    name, scope, store = SETS[request.param][:3]
    with realised_env(ml_test_store(store), name, lambda ps: [ps.torch], scope) as (pkgs, ps, python, closure):
        yield pkgs, ml_test_store(store), python, ps.torch, closure, request.param


def test_every_needed_library_is_the_sets_the_hosts_or_the_drivers(realised):
    pkgs, store_dir, _python, torch, closure, name = realised
    report = check_closure(closure, os.fspath(store_dir), DRIVER)
    assert report.elf_files > 100  # torch, triton, the set's libraries
    assert report.unresolved == [] and report.outside == []
    assert any("libcaffe2_nvrtc.so" in f for f in report.to_driver)  # libcuda.so.1: the driver's
    assert report.nvidia_trees == []
    twice = {soname: sorted(owners) for soname, owners in report.sonames.items() if len(owners) > 1}
    assert twice == {}
    assert any(s.startswith(SETS[name][5]) for s in report.sonames)
    if SETS[name][0] == "cudaPackages_12_9":  # triton's ptxas: the nvcc wheel's, and no nvcc anywhere
        assert any(p.endswith("-cuda_nvcc_wheel-12.9.86") for p in closure)
        assert not any("-cuda_nvcc-" in p for p in closure)


def test_no_leakage(realised):
    pkgs, *_, name = realised
    set_name, scope = SETS[name][:2]
    assert check_leakage(pkgs, parse_attrpath(f"{set_name}.pkgs.pkgsCuda.{scope}.torch")).leaks == ()


@pytest.mark.parametrize("decoy", [False, True])
def test_one_cudart_in_the_process_and_torch_runs_on_the_cpu(realised, tmp_path, decoy):
    pkgs, store_dir, python, torch, closure, name = realised
    set_name, _scope, _store, version, built_cuda, cudart_soname, (cudart_tree, cublas_tree) = SETS[name]
    cuda = pkgs[set_name]
    pythonpath = ""
    if decoy:  # a stray NVIDIA wheel's tree on PYTHONPATH: torch's preload would have loaded it
        major = cudart_soname.rsplit(".", 1)[1]
        pythonpath = decoy_path(tmp_path, closure, [(cudart_tree, cudart_soname),
                                                    (cublas_tree, f"libcublas.so.{major}")])
    out = run_in_env_i(python, SCRIPT, tmp_path, pythonpath)
    assert out["version"] == version
    # torch.version.cuda is the build's: the set's for 13.0; 12.8 for the 12.9 set (minor version compatibility)
    assert out["cuda"] == built_cuda and built_cuda.split(".")[0] == cuda.cudaMajorVersion
    major, minor, patch = torch.passthru.cudnn.version.split(".")[:3]
    assert out["cudnn"] == int(major) * 10000 + int(minor) * 100 + int(patch)  # 92700
    assert out["available"] is False
    assert "Found no NVIDIA driver" in out["init"]
    assert out["matmul"][0] == [14.0, 38.0, 62.0] and out["compiled"] is True
    cudarts = [m for m in out["maps"] if "libcudart.so" in m]
    assert len(cudarts) == 1 and cudarts[0].startswith(os.fspath(store_dir))
    cuda_libs = cuda_libraries_mapped(out["maps"])
    assert cuda_libs and inside(cuda_libs, closure)
    assert not any("decoy" in m for m in out["maps"])
    assert out["cubin"] > 1000 and out["ptxas"].startswith(os.fspath(store_dir))  # the set's ptxas assembled it
    if set_name == "cudaPackages_12_9":
        assert "-cuda_nvcc_wheel-12.9.86/bin/ptxas" in out["ptxas"]
