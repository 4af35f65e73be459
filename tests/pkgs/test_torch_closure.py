"""One CUDA in torch's closure, proven without a GPU (issue 20, part 6): the CUDA 13.0 set's torch realised
from NVIDIA's and PyTorch's wheels, then checked as a user would run it, in ``env -i``.

The closure is about 3 GB of wheels (5.4 GB installed), so the test runs only when asked
(``CUDAPKGS_TEST_TORCH=1``) on a machine whose pip reaches a package index, and keeps its store and
wheel cache in the test cache (``$CUDAPKGS_TEST_CACHE_HOME``, else ``~/.cache``): a second run only
checks.  rdma-core (libcufile's and NVSHMEM's InfiniBand libraries) comes through apt-get, zlib
(triton's) from a source mirror or GitHub.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.leakage import check_leakage
from cudapkgs.lib.attrpath import parse_attrpath
from cudapkgs.realise.scheduler import realise_parallel
from cudapkgs.store.store import Store

from closure_checks import CUDA_SONAMES, check_closure  # tests/pkgs is on sys.path (rootdir conftest)

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_TORCH") != "1",
                       reason="realises torch's 3 GB closure: set CUDAPKGS_TEST_TORCH=1 to run it"),
    pytest.mark.skipif(shutil.which("apt-get") is None, reason="rdma-core comes through apt-get (Debian/Ubuntu)"),
]

ATTR = "cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch"
DRIVER = "/run/opengl-driver/lib"
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
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def realised(tmp_path_factory):
    """(pkgs, store dir, withPackages env path, torch package) with the closure realised (cached)."""
    from conftest import SHARED, _pip_reaches_index, _test_cache_home

    if not _pip_reaches_index("torch"):
        pytest.skip("pip cannot reach its package index")
    home = _test_cache_home()
    store_dir = home / "cudapkgs" / "test-stores" / "torch-cu130"
    env = {"XDG_CACHE_HOME": os.fspath(home)}
    if (SHARED / "sources").is_dir() and not os.environ.get("CUDAPKGS_SOURCE_MIRRORS"):
        env["CUDAPKGS_SOURCE_MIRRORS"] = os.fspath(SHARED / "sources")  # zlib's archive, hash-checked
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        config = {"allowUnfree": True, "fetchers": ["wheels"], "prebuiltWheels": ["nccl", "libnvshmem"],
                  "storeDir": os.fspath(store_dir), "driverLibDir": DRIVER}
        pkgs = cudapkgs.import_pkgs(config=config)
        torch = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch
        python = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.withPackages([torch])
        with Store.open(store_dir) as store:
            realise_parallel(store, [python.derivation], jobs=2)
            closure = store.closure([python.out])
        yield pkgs, store_dir, python.out, torch, closure
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_needed_library_is_the_sets_the_hosts_or_the_drivers(realised):
    pkgs, store_dir, _python, torch, closure = realised
    report = check_closure(closure, os.fspath(store_dir), DRIVER)
    assert report.elf_files > 100  # torch, triton, the set's libraries
    assert report.unresolved == [] and report.outside == []
    assert any("libcaffe2_nvrtc.so" in f for f in report.to_driver)  # libcuda.so.1: the driver's
    assert report.nvidia_trees == []
    twice = {soname: sorted(owners) for soname, owners in report.sonames.items() if len(owners) > 1}
    assert twice == {}
    assert any(s.startswith("libcudart.so.13") for s in report.sonames)


def test_no_leakage(realised):
    pkgs, *_ = realised
    assert check_leakage(pkgs, parse_attrpath(ATTR)).leaks == ()


def _run(python: str, tmp_path: Path, pythonpath: str = "") -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # env -i: no LD_LIBRARY_PATH, no CUDA_HOME; PATH only for inductor's C++ compiler (torch.compile on the CPU).
    env = ["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", *([f"PYTHONPATH={pythonpath}"] if pythonpath else [])]
    done = subprocess.run([*env, f"{python}/bin/python3", "-c", SCRIPT], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("decoy", [False, True])
def test_one_cudart_in_the_process_and_torch_runs_on_the_cpu(realised, tmp_path, decoy):
    pkgs, store_dir, python, torch, closure = realised
    cuda = pkgs.cudaPackages_13_0
    pythonpath = ""
    if decoy:  # a stray NVIDIA wheel's tree on PYTHONPATH: torch's preload would have loaded it
        lib = tmp_path / "decoy" / "nvidia" / "cu13" / "lib"
        lib.mkdir(parents=True)
        cudart = next(Path(p) for p in closure if p.endswith("-cuda_cudart-13.0.96-lib"))
        for name in ("libcudart.so.13", "libcublas.so.13"):
            source = next((Path(p) / "lib" / name for p in closure if (Path(p) / "lib" / name).exists()), None)
            shutil.copy(source or cudart / "lib" / "libcudart.so.13", lib / name)
        pythonpath = os.fspath(tmp_path / "decoy")
    out = _run(python, tmp_path, pythonpath)
    assert out["version"] == "2.14.1+cu130"
    assert out["cuda"] == cuda.cudaMajorMinorVersion  # "13.0"
    major, minor, patch = torch.passthru.cudnn.version.split(".")[:3]
    assert out["cudnn"] == int(major) * 10000 + int(minor) * 100 + int(patch)  # 92700
    assert out["available"] is False
    assert "Found no NVIDIA driver" in out["init"]
    assert out["matmul"][0] == [14.0, 38.0, 62.0] and out["compiled"] is True
    cudarts = [m for m in out["maps"] if "libcudart.so" in m]
    assert len(cudarts) == 1 and cudarts[0].startswith(os.fspath(store_dir))
    cuda_libs = [m for m in out["maps"] if any(__import__("fnmatch").fnmatchcase(os.path.basename(m), p)
                                                for p in CUDA_SONAMES)]
    assert cuda_libs and all(any(m.startswith(p + "/") for p in closure) for m in cuda_libs)
    assert not any("decoy" in m for m in out["maps"])
