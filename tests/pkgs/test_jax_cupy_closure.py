"""JAX and CuPy realised on the CUDA 13.0 set and on the default CUDA 12.9 set (CPython 3.11 and 3.12) from their
wheels and run as a user would, in ``env -i``: they import, JAX computes on the CPU after its CUDA plugin was
discovered (and found no GPU), XLA's CUDA directory (``--xla_gpu_cuda_data_dir``) holds the set's ptxas and
libdevice, CuPy's NVRTC is the set's and compiles a kernel to PTX (no GPU needed), a CuPy array op fails with a
clear no-driver message, no package reaches another CUDA set (the leakage check), and every CUDA library in
the process is the set's, once, also with a decoy NVIDIA wheel's tree on PYTHONPATH.

The wheels are 124 MB (jax-cuda13-pjrt; jax-cuda12-pjrt about the same), 70 MB (cupy-cuda13x, cupy-cuda12x)
and 7 MB (the plugins) from PyPI, jax and jaxlib (85 MB) from the package index pip is configured with; the
set's libraries are NVIDIA's wheels (about 2.5 GB, cuDNN the largest). It shares torch's cached test stores
(the same set's libraries: one download for both), so it runs only when asked (``CUDAPKGS_TEST_ML=1`` or
``CUDAPKGS_TEST_TORCH=1``) on a machine whose pip reaches an index with those wheels; a case whose
interpreter this machine lacks skips, naming it.
"""

from __future__ import annotations

import os

import pytest

from cudapkgs.leakage import check_leakage
from cudapkgs.lib.attrpath import parse_attrpath

from closure_checks import (  # tests/pkgs is on sys.path (rootdir conftest)
    DRIVER, check_closure, cuda_libraries_mapped, decoy_path, inside, ml_test_store, realised_env, run_in_env_i)

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(not (os.environ.get("CUDAPKGS_TEST_ML") == "1" or os.environ.get("CUDAPKGS_TEST_TORCH") == "1"),
                       reason="realises the CUDA 13.0 and 12.9 sets' libraries (about 2.5 GB of wheels each) and JAX's and CuPy's "
                              "wheels: set CUDAPKGS_TEST_ML=1 to run it"),
]

# case -> (set, Python scope, test store, CUDA major, the decoy tree the plugin's _load would have searched)
CASES = {
    "13.0": ("cudaPackages_13_0", "python3Packages", "torch-cu130", "13", ("cu13", "libcudart.so.13")),
    "12.9-cp311": ("cudaPackages_12_9", "python311Packages", "torch-cu129", "12", ("cuda_runtime", "libcudart.so.12")),
    "12.9-cp312": ("cudaPackages_12_9", "python312Packages", "torch-cu129", "12", ("cuda_runtime", "libcudart.so.12")),
}
SCRIPT = r"""
import json, os, sys
out = {}
import jax, jax.numpy as jnp
out["jax"] = jax.__version__
out["devices"] = [d.platform for d in jax.devices()]  # the CUDA plugin is discovered (no GPU: CPU)
out["plugins"] = sorted(m for m in sys.modules if m.startswith("jax_plugins.xla_cuda"))
out["xla_flags"] = os.environ.get("XLA_FLAGS", "")
x = jnp.arange(6.0).reshape(2, 3)
out["jax_matmul"] = (x @ x.T).tolist()
import cupy
out["cupy"] = cupy.__version__
from cupy.cuda import nvrtc
out["nvrtc_version"] = list(nvrtc.getVersion())
from cupy_backends.cuda.libs import nvrtc as low
program = low.createProgram('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }', "k.cu", [], [])
low.compileProgram(program, ["--gpu-architecture=compute_90"])
out["ptx"] = ".entry k" in low.getPTX(program).decode()
try:
    cupy.arange(3).sum()
except Exception as error:
    out["cupy_error"] = f"{type(error).__name__}: {error}"
out["maps"] = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module", params=list(CASES))
def realised(request):
    """(pkgs, store dir, the withPackages env, its closure, case) with jax, the plugin and cupy realised (cached)."""
    from conftest import _pip_reaches_index

    case = CASES[request.param]
    major = case[3]
    for project in ("jax", f"jax-cuda{major}-pjrt", f"cupy-cuda{major}x"):
        if not _pip_reaches_index(project):
            pytest.skip(f"pip's package index has no {project} (jax and jaxlib come from the configured index, "
                        f"the CUDA {major} plugin and cupy-cuda{major}x from PyPI)")
    store_dir = ml_test_store(case[2])  # torch's: the same set's libraries
    packages = lambda ps: [ps.jax, ps[f"jax-cuda{major}-plugin"], ps.cupy]  # noqa: E731
    with realised_env(store_dir, case[0], packages, case[1]) as (pkgs, _ps, python, closure):
        yield pkgs, store_dir, python, closure, case


def test_every_needed_library_is_the_sets_and_no_nvidia_tree(realised):
    pkgs, store_dir, _python, closure, (set_name, scope, _store, major, (_tree, cudart)) = realised
    report = check_closure(closure, os.fspath(store_dir), DRIVER)
    # cuTENSOR is not fetched from NVIDIA's wheels: only cupyx.cutensor's module lacks its libraries.
    assert all("cupy_backends/cuda/libs/cutensor" in u for u in report.unresolved), report.unresolved
    assert report.outside == [] and report.nvidia_trees == []
    twice = {soname: sorted(owners) for soname, owners in report.sonames.items() if len(owners) > 1}
    assert twice == {}
    assert cudart in report.sonames and f"libnvrtc.so.{major}" in report.sonames
    for name in (f"jax-cuda{major}-plugin", "cupy"):  # no path of another CUDA set
        assert check_leakage(pkgs, parse_attrpath(f'{set_name}.pkgs.pkgsCuda.{scope}."{name}"')).leaks == ()


@pytest.mark.parametrize("decoy", [False, True])
def test_jax_finds_its_plugin_and_cupy_compiles_with_the_sets_nvrtc(realised, tmp_path, decoy):
    pkgs, store_dir, python, closure, (set_name, _scope, _store, major, tree) = realised
    cuda = pkgs[set_name]
    # A stray NVIDIA wheel's tree: the plugin's _load would have loaded libcudart from it
    pythonpath = decoy_path(tmp_path, closure, [tree], packages=True) if decoy else ""
    out = run_in_env_i(python, SCRIPT, tmp_path, pythonpath)
    assert out["jax"] == "0.10.2" and out["devices"] == ["cpu"]
    assert out["plugins"] == [f"jax_plugins.xla_cuda{major}"]  # discovered and initialised (no GPU here)
    assert out["jax_matmul"] == [[5.0, 14.0], [14.0, 50.0]]
    # XLA's CUDA directory, searched before /usr/local/cuda: the set's ptxas and libdevice
    flag = next(f for f in out["xla_flags"].split() if f.startswith("--xla_gpu_cuda_data_dir="))
    data_dir = flag.partition("=")[2]
    ptxas = os.path.realpath(os.path.join(data_dir, "bin", "ptxas"))
    assert inside([ptxas, os.path.realpath(os.path.join(data_dir, "nvvm", "libdevice", "libdevice.10.bc"))], closure)
    assert f"-cuda{cuda.cudaMajorMinorVersion}-cuda_nvcc" in ptxas, ptxas
    assert out["cupy"] == "14.2.0"
    assert out["nvrtc_version"] == [int(x) for x in str(cuda.cuda_nvrtc.version).split(".")[:2]]  # the set's NVRTC
    assert out["ptx"] is True  # compiled without a GPU
    assert out["cupy_error"].startswith("CUDARuntimeError: cudaErrorInsufficientDriver")  # no driver here
    cuda_libs = cuda_libraries_mapped(out["maps"])
    assert cuda_libs and inside(cuda_libs, closure), cuda_libs
    assert any(f"libnvrtc.so.{major}" in m for m in cuda_libs)
    assert len([m for m in out["maps"] if "libcudart.so" in m]) <= 1
    assert not any("decoy" in m for m in out["maps"])
