"""torch.onnx.export from the store, run by the store's ONNX Runtime: python312Packages of the CUDA 13.0 set
(the GPU proof's) with torch, onnx and onnxruntime, realised into the default store, run in ``env -i``
on the CPU: a small conv model exported by the TorchScript exporter (``dynamo=False``: needs ``onnx``),
run on CPUExecutionProvider, equal to torch's output within 1e-4.

Realises torch's closure (about 3 GB of wheels) into the shared default store: runs only when asked
(``CUDAPKGS_TEST_ML=1``) where pip reaches PyPI.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_ML") != "1",
                       reason="realises torch's CUDA 13.0 closure (about 3 GB of wheels) into the default store: "
                              "set CUDAPKGS_TEST_ML=1 to run it"),
]

SCRIPT = r"""
import io, json, sys
import numpy as np, torch, onnx, onnxruntime as ort
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()).eval()
x = torch.randn(2, 3, 16, 16)
with torch.no_grad():
    want = model(x).numpy()
buf = io.BytesIO()
torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], output_names=["y"], opset_version=17)
onnx.checker.check_model(onnx.load_from_string(buf.getvalue()))
session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
(got,) = session.run(None, {"x": x.numpy()})
json.dump({"providers": session.get_providers(), "shape": list(got.shape),
           "diff": float(np.abs(got - want).max()), "onnx": onnx.__version__,
           "files": [m.__file__ for m in (torch, onnx, ort, np)]}, sys.stdout)
"""


def test_torch_onnx_export_runs_in_the_stores_onnxruntime():
    from conftest import _pip_reaches_index

    import cudapkgs
    from cudapkgs.realise.scheduler import realise_parallel
    from cudapkgs.store.location import default_store_dir
    from cudapkgs.store.store import Store

    for project in ("onnx", "onnxruntime-gpu"):
        if not _pip_reaches_index(project):
            pytest.skip(f"pip's package index has no {project} (PyPI has it)")
    store_dir = default_store_dir()
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "storeDir": store_dir,
                                        "prebuiltWheels": ["nccl", "libnvshmem"], "cudaCapabilities": ["9.0"]})
    ps = pkgs.cudaPackages_13_0.pkgs.pkgsCuda.python312Packages
    env = ps.withPackages([ps.torch, ps.onnx, ps.onnxruntime, ps.numpy])
    with Store.open(store_dir) as store:
        realise_parallel(store, [env.derivation], jobs=2)
    done = subprocess.run(["env", "-i", f"{env.out}/bin/python3", "-c", SCRIPT], capture_output=True, text=True,
                          cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["providers"] == ["CPUExecutionProvider"] and out["shape"] == [2, 4]
    assert out["diff"] < 1e-4, out
    assert out["onnx"] == "1.23.2"
    assert all(f.startswith(store_dir + "/") for f in out["files"]), out["files"]
    with Store.open(store_dir) as store:  # importing wrote nothing into the store
        assert store.verify(paths=[env.out, ps.onnx.out, ps.torch.out]) == []
