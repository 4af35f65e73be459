"""torchvision, torchaudio and ONNX Runtime realised on the CUDA 13.0 set (with torch) and run as a user would,
in ``env -i``, without a GPU: they import, compute on the CPU, ONNX Runtime lists its CUDA provider, every
DT_NEEDED of every ELF file (``libonnxruntime_providers_cuda.so`` named) resolves into the store or the host's
C runtime, and every CUDA library mapped is the closure's, libcudart once.

It realises torch's closure (about 3 GB of wheels, 5 GiB in the store) in torch's cached test store and adds
torchvision (7 MB), torchaudio (2 MB), pillow and onnxruntime-gpu (256 MB): too large for CI, so it runs only
when asked (``CUDAPKGS_TEST_ML=1`` or ``CUDAPKGS_TEST_TORCH=1``) where pip reaches PyPI.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.elf import read as elf
from cudapkgs.realise.scheduler import realise_parallel
from cudapkgs.store.store import Store

from closure_checks import HOST_LIBS, check_closure  # tests/pkgs is on sys.path (rootdir conftest)

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(not (os.environ.get("CUDAPKGS_TEST_ML") == "1" or os.environ.get("CUDAPKGS_TEST_TORCH") == "1"),
                       reason="realises torch's CUDA 13.0 closure (about 3 GB of wheels) and torchvision, torchaudio "
                              "and onnxruntime-gpu: set CUDAPKGS_TEST_ML=1 to run it"),
]

DRIVER = "/run/opengl-driver/lib"
SCRIPT = r"""
import json, sys
out = {}
import torch, torchvision, torchaudio, onnxruntime as ort
out["versions"] = [torch.__version__, torchvision.__version__, torchaudio.__version__, ort.__version__]
out["providers"] = ort.get_available_providers()
from torchvision.ops import nms
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [50., 50., 60., 60.]])
out["nms"] = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist()
model = torchvision.models.resnet18(weights=None).eval()
with torch.no_grad():
    out["resnet"] = list(model(torch.randn(1, 3, 64, 64)).shape)
import torchaudio.functional as F
wave = torch.sin(torch.linspace(0, 100, 1600)).unsqueeze(0)
out["lfilter"] = list(F.lfilter(wave, torch.tensor([1.0, -0.5]), torch.tensor([0.5, 0.5])).shape)
out["maps"] = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def realised():
    """(store dir, the withPackages env, its closure) with torch, torchvision, torchaudio and onnxruntime (cached)."""
    from conftest import SHARED, _pip_reaches_index, _test_cache_home

    for project in ("torchvision", "onnxruntime-gpu"):
        if not _pip_reaches_index(project):
            pytest.skip(f"pip's package index has no {project} (PyPI has it)")
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
        python = ps.withPackages([ps.torch, ps.torchvision, ps.torchaudio, ps.onnxruntime])
        with Store.open(store_dir) as store:
            realise_parallel(store, [python.derivation], jobs=2)
            closure = store.closure([python.out])
        yield store_dir, python.out, closure, ps
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_every_needed_library_resolves_into_the_store_one_cuda(realised):
    store_dir, _python, closure, ps = realised
    report = check_closure(closure, os.fspath(store_dir), DRIVER)
    # The TensorRT provider's libnvinfer/libnvonnxparser: the set's tensorrt is not fetched from wheels
    assert all("libonnxruntime_providers_tensorrt.so" in u for u in report.unresolved), report.unresolved
    assert report.outside == [] and report.nvidia_trees == []
    twice = {soname: sorted(owners) for soname, owners in report.sonames.items() if len(owners) > 1}
    assert twice == {}  # torchvision's bundled libcudart and libnvjpeg are gone
    # The CUDA provider, as the brief names it: each DT_NEEDED found through its own RUNPATH in the closure
    provider = Path(ps.onnxruntime.out, "lib", f"python{ps.pythonVersion}", "site-packages", "onnxruntime", "capi",
                    "libonnxruntime_providers_cuda.so")
    info = elf.read_elf(provider)
    assert {"libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10", "libcudart.so.13"} <= set(info.needed)
    for needed in info.needed:
        if needed == "libcuda.so.1" or any(__import__("fnmatch").fnmatch(needed, p) for p in HOST_LIBS):
            continue
        found = [d for d in info.runpath if Path(d, needed).exists()]
        assert found and any(found[0].startswith(p + "/") for p in closure), (needed, info.runpath)
    assert DRIVER in info.runpath  # libcuda.so.1: the driver's


@pytest.mark.parametrize("decoy", [False, True])
def test_they_import_and_compute_on_the_cpu_from_the_store(realised, tmp_path, decoy):
    _store_dir, python, closure, _ps = realised
    home = tmp_path / "home"
    home.mkdir()
    pythonpath = []
    if decoy:  # a stray NVIDIA wheel's tree, where onnxruntime's and torch's preloads looked
        lib = tmp_path / "decoy" / "nvidia" / "cu13" / "lib"
        lib.mkdir(parents=True)
        cudart = next(Path(p) / "lib" / "libcudart.so.13" for p in closure if (Path(p) / "lib" / "libcudart.so.13").exists())
        (lib / "libcudart.so.13").write_bytes(cudart.read_bytes())
        pythonpath = [f"PYTHONPATH={tmp_path / 'decoy'}"]
    done = subprocess.run(["env", "-i", f"HOME={home}", "PATH=/usr/bin:/bin", *pythonpath, f"{python}/bin/python3",
                           "-c", SCRIPT], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["versions"][0].startswith("2.14.1") and out["versions"][1].startswith("0.29.1")
    assert out["versions"][2].startswith("2.11.1") and out["versions"][3] == "1.31.1"
    assert "CUDAExecutionProvider" in out["providers"] and "CPUExecutionProvider" in out["providers"]
    assert out["nms"] == [0, 2] and out["resnet"] == [1, 1000] and out["lfilter"] == [1, 1600]
    cuda = [m for m in out["maps"] if "/libcu" in m or "/libnv" in m]
    assert cuda and all(any(m.startswith(p + "/") for p in closure) for m in cuda), cuda
    assert len([m for m in out["maps"] if "libcudart" in m]) == 1
    assert not any("decoy" in m or "torchvision.libs/libcudart" in m for m in out["maps"])
