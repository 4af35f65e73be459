"""torchvision, torchaudio (and ONNX Runtime on CUDA 13) realised with torch on the CUDA 13.0 set and on the
default CUDA 12.9 set (CPython 3.11 and 3.12), and run as a user would, in ``env -i``, without a GPU: they
import, compute on the CPU (torchvision's ``ops.nms``, a resnet18 forward, torchaudio's lfilter and
MelSpectrogram), ``torch.version.cuda`` is the build's, ONNX Runtime lists its CUDA provider, every DT_NEEDED of
every ELF file (``libonnxruntime_providers_cuda.so`` named) resolves into the store or the host's C runtime,
no companion reaches another CUDA set (the leakage check), and every CUDA library mapped is the closure's,
libcudart once, also with a stray NVIDIA wheel's tree on PYTHONPATH.

It realises torch's closure (about 3 GB of wheels, 5 GiB in the store) in torch's cached test store and adds
torchvision (7 MB), torchaudio (2 MB), pillow and onnxruntime-gpu (256 MB): too large for CI, so it runs only
when asked (``CUDAPKGS_TEST_ML=1`` or ``CUDAPKGS_TEST_TORCH=1``) where pip reaches PyPI; a case whose
interpreter this machine lacks (python312Packages without a CPython 3.12) skips, naming it.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

from cudapkgs.elf import read as elf
from cudapkgs.leakage import check_leakage
from cudapkgs.lib.attrpath import parse_attrpath

from closure_checks import (  # tests/pkgs is on sys.path (rootdir conftest)
    DRIVER, HOST_LIBS, check_closure, cuda_libraries_mapped, decoy_path, inside, ml_test_store, realised_env,
    run_in_env_i)

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(not (os.environ.get("CUDAPKGS_TEST_ML") == "1" or os.environ.get("CUDAPKGS_TEST_TORCH") == "1"),
                       reason="realises torch's CUDA 13.0 and 12.9 closures (about 3 GB of wheels each) and torchvision, torchaudio "
                              "and onnxruntime-gpu: set CUDAPKGS_TEST_ML=1 to run it"),
]

# case -> (set, Python scope, test store, versions of torch, torchvision, torchaudio, onnxruntime (None: not
#          in this case), torch.version.cuda, the decoy tree and soname torch's preload would have searched)
CASES = {
    "13.0": ("cudaPackages_13_0", "python3Packages", "torch-cu130", ("2.14.1", "0.29.1", "2.11.1", "1.31.1"), "13.0",
             ("cu13", "libcudart.so.13")),
    "12.9-cp311": ("cudaPackages_12_9", "python311Packages", "torch-cu129", ("2.9.1", "0.24.1", "2.9.1", None), "12.8",
                   ("cuda_runtime", "libcudart.so.12")),
    "12.9-cp312": ("cudaPackages_12_9", "python312Packages", "torch-cu129", ("2.9.1", "0.24.1", "2.9.1", None), "12.8",
                   ("cuda_runtime", "libcudart.so.12")),
}
SCRIPT = r"""
import json, os, sys
out = {}
import torch, torchvision, torchaudio
out["versions"] = [torch.__version__, torchvision.__version__, torchaudio.__version__]
out["cuda"] = torch.version.cuda
if os.environ.get("WITH_ORT") == "1":
    import onnxruntime as ort
    out["versions"].append(ort.__version__)
    out["providers"] = ort.get_available_providers()
from torchvision.ops import nms
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [50., 50., 60., 60.]])
out["nms"] = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), 0.5).tolist()
model = torchvision.models.resnet18(weights=None).eval()
with torch.no_grad():
    out["resnet"] = list(model(torch.randn(1, 3, 64, 64)).shape)
import torchaudio.functional as F, torchaudio.transforms as T
wave = torch.sin(torch.linspace(0, 100, 1600)).unsqueeze(0)
out["lfilter"] = list(F.lfilter(wave, torch.tensor([1.0, -0.5]), torch.tensor([0.5, 0.5])).shape)
out["melspec"] = list(T.MelSpectrogram(sample_rate=16000, n_fft=400, n_mels=40)(wave).shape)
out["maps"] = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module", params=list(CASES))
def realised(request):
    """(pkgs, store dir, the withPackages env, its closure, ps, case) with torch, torchvision, torchaudio (and
    onnxruntime on 13.0) realised (cached)."""
    from conftest import _pip_reaches_index

    case = CASES[request.param]
    for project in ("torchvision", "onnxruntime-gpu"):
        if not _pip_reaches_index(project):
            pytest.skip(f"pip's package index has no {project} (PyPI has it)")
    with_ort = case[3][3] is not None

    def packages(ps):
        return [ps.torch, ps.torchvision, ps.torchaudio, *([ps.onnxruntime] if with_ort else [])]

    store_dir = ml_test_store(case[2])  # torch's: the same set's libraries
    with realised_env(store_dir, case[0], packages, case[1]) as (pkgs, ps, python, closure):
        yield pkgs, store_dir, python, closure, ps, case


def test_every_needed_library_resolves_into_the_store_one_cuda(realised):
    pkgs, store_dir, _python, closure, ps, case = realised
    set_name, scope, _store, versions, _cuda, (_tree, cudart) = case
    report = check_closure(closure, os.fspath(store_dir), DRIVER)
    # The TensorRT provider's libnvinfer/libnvonnxparser: the set's tensorrt is not fetched from wheels
    assert all("libonnxruntime_providers_tensorrt.so" in u for u in report.unresolved), report.unresolved
    assert report.outside == [] and report.nvidia_trees == []
    twice = {soname: sorted(owners) for soname, owners in report.sonames.items() if len(owners) > 1}
    assert twice == {}  # torchvision's bundled libcudart and libnvjpeg are gone
    assert cudart in report.sonames
    for name in ("torchvision", "torchaudio"):  # no path of another CUDA set
        assert check_leakage(pkgs, parse_attrpath(f"{set_name}.pkgs.pkgsCuda.{scope}.{name}")).leaks == ()
    if versions[3] is None:
        return
    # The CUDA provider, as the brief names it: each DT_NEEDED found through its own RUNPATH in the closure
    provider = Path(ps.onnxruntime.out, "lib", f"python{ps.pythonVersion}", "site-packages", "onnxruntime", "capi",
                    "libonnxruntime_providers_cuda.so")
    info = elf.read_elf(provider)
    assert {"libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10", "libcudart.so.13"} <= set(info.needed)
    for needed in info.needed:
        if needed == "libcuda.so.1" or any(fnmatch.fnmatch(needed, p) for p in HOST_LIBS):
            continue
        found = [d for d in info.runpath if Path(d, needed).exists()]
        assert found and any(found[0].startswith(p + "/") for p in closure), (needed, info.runpath)
    assert DRIVER in info.runpath  # libcuda.so.1: the driver's


@pytest.mark.parametrize("decoy", [False, True])
def test_they_import_and_compute_on_the_cpu_from_the_store(realised, tmp_path, decoy):
    _pkgs, _store_dir, python, closure, _ps, case = realised
    versions, built_cuda, decoy_tree = case[3], case[4], case[5]
    # A stray NVIDIA wheel's tree, where onnxruntime's and torch's preloads looked
    pythonpath = decoy_path(tmp_path, closure, [decoy_tree]) if decoy else ""
    out = run_in_env_i(python, SCRIPT, tmp_path, pythonpath, WITH_ORT="1" if versions[3] else "0")
    assert [v.split("+")[0] for v in out["versions"]] == [v for v in versions if v is not None]
    assert out["cuda"] == built_cuda  # the build's (12.8 for the 12.9 set: minor version compatibility)
    if versions[3] is not None:
        assert "CUDAExecutionProvider" in out["providers"] and "CPUExecutionProvider" in out["providers"]
    assert out["nms"] == [0, 2] and out["resnet"] == [1, 1000] and out["lfilter"] == [1, 1600]
    assert out["melspec"] == [1, 40, 9]
    cuda = cuda_libraries_mapped(out["maps"]) + [m for m in out["maps"] if "/libnvjpeg" in m]
    assert cuda and inside(cuda, closure), cuda
    assert len([m for m in out["maps"] if "libcudart" in m]) == 1
    assert not any("decoy" in m or "torchvision.libs/libcudart" in m for m in out["maps"])
