"""What the ML packages look up by name at run time is the set's, with a host CUDA's decoy on every search path
(issue 31, deliverable 5).

No GPU is needed: NVRTC versions and compiles on the CPU, cuda-pathfinder's loads, torch's NVRTC lookup,
XLA's CUDA directory and Triton's ptxas are all resolved before a device is asked for. The decoy is a
``/usr/local/cuda``-like tree named by ``CUDA_HOME``, ``CUDA_PATH``, ``LD_LIBRARY_PATH`` and ``PATH``,
whose ``libnvrtc.so.13``, ``libnvJitLink.so.13``, ``ptxas`` and ``nvcc`` write a marker file when loaded
or run. Before: CuPy's ``cupy.cuda.nvrtc.getVersion()`` failed without a system CUDA
("Failure finding libnvrtc.so.13") and took /usr/local/cuda-13.0's with one; XLA ran /usr/local/cuda's ptxas.

It realises the CUDA 13.0 set's and the default CUDA 12.9 set's cupy, jax (with its CUDA plugin) and torch
from their wheels into the shared default store (``~/.local/share/cudapkgs/store``, or
``$CUDAPKGS_TEST_ML_STORE``), about 5 GB a set the first time, so it runs only when asked
(``CUDAPKGS_TEST_ML=1``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.realise.scheduler import realise_parallel
from cudapkgs.store.store import Store

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_ML") != "1",
                       reason="realises the CUDA 13.0 and 12.9 sets' cupy, jax and torch closures (about 5 GB of wheels each) into "
                              "the shared default store: set CUDAPKGS_TEST_ML=1 to run it"),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to make the decoy libraries"),
]

SCRIPT = r"""
import json, os, sys
out = {}
import cupy
from cupy.cuda import nvrtc
out["cupy_nvrtc_version"] = list(nvrtc.getVersion())
from cupy_backends.cuda.libs import nvrtc as low
program = low.createProgram('extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }', "k.cu", [], [])
low.compileProgram(program, ["--gpu-architecture=compute_90"])
out["ptx"] = ".entry k" in low.getPTX(program).decode()
from cuda import pathfinder
out["pathfinder"] = {name: [pathfinder.load_nvidia_dynamic_lib(name).abs_path,
                            pathfinder.load_nvidia_dynamic_lib(name).found_via] for name in ("nvrtc", "nvJitLink")}
import torch.cuda._utils
out["torch_nvrtc"] = torch.cuda._utils._get_nvrtc_library()._name
import jax
jax.devices()  # the CUDA plugin is discovered (and fails: no GPU); XLA_FLAGS are set by then
out["xla_flags"] = os.environ.get("XLA_FLAGS", "")
import triton
tool = triton.knobs.nvidia.ptxas
out["triton_ptxas"] = [os.path.realpath(tool.path), tool.version]
out["maps"] = sorted({line.split()[-1] for line in open("/proc/self/maps")
                      if any(n in line for n in ("libnvrtc", "libnvJitLink", "libcudnn", "libcudart"))})
json.dump(out, sys.stdout)
"""

FAKE_LIBRARY = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void mark(void) {
    FILE *f = fopen(getenv("DECOY_MARKER"), "a");
    if (f) { fputs("decoy library loaded\n", f); fclose(f); }
}
int nvrtcVersion(int *major, int *minor) { *major = 99; *minor = 9; return 0; }
"""


@pytest.fixture(scope="module", params=["cudaPackages_13_0", "cudaPackages_12_9"])
def realised(request):
    """(the set, the withPackages env path) with cupy, jax, its CUDA plugin and torch realised (CPython 3.11 and
    CUDA 13 wheels on the 13.0 set; cupy-cuda12x, jax-cuda12-plugin and torch 2.9.1 on the default 12.9 set)."""
    from conftest import _pip_reaches_index, _test_cache_home

    major = request.param.split("_")[1]
    for project in (f"cupy-cuda{major}x", f"jax-cuda{major}-pjrt", "torch"):
        if not _pip_reaches_index(project):
            pytest.skip(f"pip's package index has no {project}")
    store_dir = Path(os.environ.get("CUDAPKGS_TEST_ML_STORE") or Path.home() / ".local" / "share" / "cudapkgs" / "store")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = os.fspath(_test_cache_home())  # the shared wheel cache
    try:
        pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "storeDir": os.fspath(store_dir)})
        cuda = pkgs[request.param]
        ps = cuda.pkgs.pkgsCuda.python3Packages
        python = ps.withPackages([ps.cupy, ps.jax, ps[f"jax-cuda{major}-plugin"], ps.torch])
        with Store.open(store_dir) as store:
            realise_parallel(store, [python.derivation], jobs=2)
        yield cuda, python.out
    finally:
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old


def decoy_cuda(root: Path, major: str) -> Path:
    """A host-CUDA-like tree whose NVRTC, nvJitLink (CUDA `major`'s sonames), ptxas and nvcc write
    $DECOY_MARKER when used."""
    (root / "bin").mkdir(parents=True)
    (root / "lib64").mkdir()
    source = root / "fake.c"
    source.write_text(FAKE_LIBRARY)
    for soname in (f"libnvrtc.so.{major}", f"libnvJitLink.so.{major}"):
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", root / "lib64" / soname, source],
                       check=True)
        (root / "lib64" / soname.rsplit(".", 1)[0]).symlink_to(soname)
    for tool in ("ptxas", "nvcc", "nvlink"):
        script = root / "bin" / tool
        script.write_text('#!/bin/sh\necho "decoy $0 ran" >> "$DECOY_MARKER"\necho "Cuda compilation tools, release 99.9"\n')
        script.chmod(0o755)
    return root


def lib_dir(package) -> str:
    return f"{package['lib' if 'lib' in package.outputs else 'out']}/lib"


@pytest.mark.parametrize("host_cuda", [False, True], ids=["no host CUDA", "decoy host CUDA on every path"])
def test_every_lookup_by_name_is_the_sets(realised, tmp_path, host_cuda):
    cuda, python = realised
    marker = tmp_path / "marker"
    env = {"HOME": os.fspath(tmp_path), "PATH": "/usr/bin:/bin", "DECOY_MARKER": os.fspath(marker)}
    if host_cuda:
        decoy = decoy_cuda(tmp_path / "usr-local-cuda", cuda.cudaMajorVersion)
        env.update(CUDA_HOME=os.fspath(decoy), CUDA_PATH=os.fspath(decoy), LD_LIBRARY_PATH=os.fspath(decoy / "lib64"),
                   PATH=f"{decoy / 'bin'}:/usr/bin:/bin")
    done = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), f"{python}/bin/python3", "-c", SCRIPT],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Cannot determine the NVRTC version" not in done.stderr
    out = json.loads(done.stdout)
    nvrtc, jitlink = lib_dir(cuda.cuda_nvrtc), lib_dir(cuda.libnvjitlink)
    major = cuda.cudaMajorVersion
    major_minor = [int(x) for x in str(cuda.cuda_nvrtc.version).split(".")[:2]]
    assert out["cupy_nvrtc_version"] == major_minor == {"13": [13, 0], "12": [12, 9]}[major]  # the set's NVRTC
    assert out["ptx"] is True  # and compiles on a machine without a GPU
    assert out["pathfinder"] == {"nvrtc": [f"{nvrtc}/libnvrtc.so.{major}", "cudapkgs set"],
                                 "nvJitLink": [f"{jitlink}/libnvJitLink.so.{major}", "cudapkgs set"]}
    assert out["torch_nvrtc"] == f"{nvrtc}/libnvrtc.so.{major}"
    # XLA: its CUDA directory is given first, and holds the set's ptxas, nvlink and libdevice (CUDA 12 with
    # wheels alone: cuda_nvcc_wheel's ptxas and nvvm, no nvlink: XLA then links cubins itself).
    flag = next(f for f in out["xla_flags"].split() if f.startswith("--xla_gpu_cuda_data_dir="))
    data_dir = Path(flag.partition("=")[2])
    from cudapkgs.pkgs.python_modules.triton import ptxas_package

    tools = ptxas_package(cuda)  # cuda_nvcc without a host compiler (so the wheels' paths name none), or the nvcc wheel
    nvcc_bin = f"{tools['bin' if 'bin' in tools.outputs else 'out']}/bin"
    assert os.path.realpath(data_dir / "bin" / "ptxas") == f"{nvcc_bin}/ptxas"
    if major == "13":
        assert os.path.realpath(data_dir / "bin" / "nvlink") == f"{nvcc_bin}/nvlink"
    libdevice = os.path.realpath(data_dir / "nvvm" / "libdevice" / "libdevice.10.bc")
    assert libdevice.startswith(str((cuda.libnvvm if major == "13" else tools).out) + "/")
    release = subprocess.run([data_dir / "bin" / "ptxas", "--version"], capture_output=True, text=True, check=True)
    assert f"release {cuda.cudaMajorMinorVersion}" in release.stdout
    assert out["triton_ptxas"] == [f"{nvcc_bin}/ptxas", cuda.cudaMajorMinorVersion]
    store = str(Path(python).parent) + "/"
    assert out["maps"] and all(path.startswith(store) for path in out["maps"]), out["maps"]
    assert not marker.exists(), marker.read_text()  # no decoy library was loaded, no decoy program run


def test_a_users_own_xla_cuda_data_dir_is_kept(realised, tmp_path):
    _cuda, python = realised
    mine = "--xla_gpu_cuda_data_dir=/opt/my-cuda --xla_dump_to=/tmp/x"
    done = subprocess.run(["env", "-i", f"HOME={tmp_path}", "PATH=/usr/bin:/bin", f"XLA_FLAGS={mine}",
                           f"{python}/bin/python3", "-c", "import os, jax; jax.devices(); print(os.environ['XLA_FLAGS'])"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == mine
