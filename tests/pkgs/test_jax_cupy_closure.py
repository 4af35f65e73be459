"""JAX and CuPy realised on the CUDA 13.0 set from their wheels and run as a user would, in ``env -i``:
they import and compute on the CPU or fail with a clear no-GPU message, every CUDA library in the
process is the set's, once, also with a decoy ``nvidia/cu13/lib`` on PYTHONPATH.

The wheels are 124 MB (jax-cuda13-pjrt), 70 MB (cupy-cuda13x) and 7 MB (jax-cuda13-plugin) from PyPI,
jax and jaxlib (85 MB) from the package index pip is configured with; the set's libraries are
NVIDIA's wheels (about 2.5 GB, cuDNN the largest). It shares torch's cached test store (the same
set's libraries: one download for both), so it runs only when asked (``CUDAPKGS_TEST_ML=1`` or
``CUDAPKGS_TEST_TORCH=1``) on a machine whose pip reaches an index with those wheels.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.realise.scheduler import realise_parallel
from cudapkgs.store.store import Store

from closure_checks import check_closure  # tests/pkgs is on sys.path (rootdir conftest)

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(not (os.environ.get("CUDAPKGS_TEST_ML") == "1" or os.environ.get("CUDAPKGS_TEST_TORCH") == "1"),
                       reason="realises the CUDA 13.0 set's libraries (about 2.5 GB of wheels) and JAX's and CuPy's "
                              "wheels: set CUDAPKGS_TEST_ML=1 to run it"),
]

DRIVER = "/run/opengl-driver/lib"
SCRIPT = r"""
import json, sys
out = {}
import jax, jax.numpy as jnp
out["jax"] = jax.__version__
out["devices"] = [d.platform for d in jax.devices()]
x = jnp.arange(6.0).reshape(2, 3)
out["jax_matmul"] = (x @ x.T).tolist()
import cupy
out["cupy"] = cupy.__version__
try:
    cupy.arange(3).sum()
except Exception as error:
    out["cupy_error"] = f"{type(error).__name__}: {error}"
out["maps"] = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def realised():
    """(pkgs, store dir, the withPackages env, its closure) with jax, the plugin and cupy realised (cached)."""
    from conftest import SHARED, _pip_reaches_index, _test_cache_home

    for project in ("jax", "jax-cuda13-pjrt", "cupy-cuda13x"):
        if not _pip_reaches_index(project):
            pytest.skip(f"pip's package index has no {project} (jax and jaxlib come from the configured index, "
                        "the CUDA 13 plugin and cupy-cuda13x from PyPI)")
    home = _test_cache_home()
    store_dir = home / "cudapkgs" / "test-stores" / "torch-cu130"  # torch's: the same set's libraries
    env = {"XDG_CACHE_HOME": os.fspath(home)}
    if (SHARED / "sources").is_dir() and not os.environ.get("CUDAPKGS_SOURCE_MIRRORS"):
        env["CUDAPKGS_SOURCE_MIRRORS"] = os.fspath(SHARED / "sources")
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"],
                                            "prebuiltWheels": ["nccl", "libnvshmem"],
                                            "storeDir": os.fspath(store_dir), "driverLibDir": DRIVER})
        ps = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python3Packages
        python = ps.withPackages([ps.jax, ps["jax-cuda13-plugin"], ps.cupy])
        with Store.open(store_dir) as store:
            realise_parallel(store, [python.derivation], jobs=2)
            closure = store.closure([python.out])
        yield pkgs, store_dir, python.out, closure
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_needed_library_is_the_sets_and_no_nvidia_tree(realised):
    _pkgs, store_dir, _python, closure = realised
    report = check_closure(closure, os.fspath(store_dir), DRIVER)
    # cuTENSOR is not fetched from NVIDIA's wheels: only cupyx.cutensor's module lacks its libraries.
    assert all("cupy_backends/cuda/libs/cutensor" in u for u in report.unresolved), report.unresolved
    assert report.outside == [] and report.nvidia_trees == []
    twice = {soname: sorted(owners) for soname, owners in report.sonames.items() if len(owners) > 1}
    assert twice == {}


@pytest.mark.parametrize("decoy", [False, True])
def test_jax_computes_on_the_cpu_and_cupy_says_there_is_no_gpu(realised, tmp_path, decoy):
    _pkgs, store_dir, python, closure = realised
    home = tmp_path / "home"
    home.mkdir()
    pythonpath = []
    if decoy:  # a stray NVIDIA wheel's tree: the plugin's _load would have loaded libcudart from it
        lib = tmp_path / "decoy" / "nvidia" / "cu13" / "lib"
        lib.mkdir(parents=True)
        (lib.parent / "__init__.py").write_text("")
        (lib.parent.parent / "__init__.py").write_text("")
        cudart = next(Path(p) / "lib" / "libcudart.so.13" for p in closure if (Path(p) / "lib" / "libcudart.so.13").exists())
        (lib / "libcudart.so.13").write_bytes(cudart.read_bytes())
        pythonpath = [f"PYTHONPATH={tmp_path / 'decoy'}"]
    done = subprocess.run(["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", *pythonpath, f"{python}/bin/python3",
                           "-c", SCRIPT], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["jax"] == "0.10.2" and out["devices"] == ["cpu"]
    assert out["jax_matmul"] == [[5.0, 14.0], [14.0, 50.0]]
    assert out["cupy"] == "14.2.0"
    assert out["cupy_error"].startswith("CUDARuntimeError: cudaErrorInsufficientDriver")  # no driver here
    cuda = [m for m in out["maps"] if "/libcu" in m or "/libnv" in m]
    assert cuda and all(any(m.startswith(p + "/") for p in closure) for m in cuda), cuda
    assert len([m for m in out["maps"] if "libcudart.so" in m]) <= 1
    assert not any("decoy" in m for m in out["maps"])
