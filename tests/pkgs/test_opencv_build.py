"""A real OpenCV build: the reduced CPU set (core, imgproc) with cv2, imported from the store under env -i.

Opt-in (CUDAPKGS_TEST_OPENCV=1): the build took 16-25 minutes on the 2-core development machine
(docs/bench-build.md, "OpenCV") and fetches PyPI's 150 MB opencv-contrib-python sdist (the trees
of Nixpkgs' hashes, docs/opencv.md), more than CI's budget allows. Set CUDAPKGS_OPENCV_STORE to
reuse a store that holds it (the test then only evaluates, links and imports).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import cudapkgs

pytestmark = pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_OPENCV") != "1",
                                reason="an OpenCV build takes 16-25 minutes on 2 cores: set CUDAPKGS_TEST_OPENCV=1")
PACKAGES = Path(__file__).resolve().parents[2] / "bench" / "device" / "opencv_packages.py"
SOURCES = Path(os.environ.get("CUDAPKGS_SOURCES", Path(__file__).resolve().parents[3] / "shared" / "sources"))


def test_reduced_cpu_build_imports_cv2_under_env_i(tmp_path):
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store
    from cudapkgs.user_files import package_file_overlay

    store_dir = os.environ.get("CUDAPKGS_OPENCV_STORE") or str(tmp_path / "store")
    pkgs = cudapkgs.import_pkgs(config={"storeDir": store_dir, "sourceMirrors": [str(SOURCES)]},
                                overlays=[package_file_overlay([str(PACKAGES)])])
    env = pkgs.opencv_cpu_env
    with Store.open(store_dir) as store:
        realise(store, [env.derivation])
    python = Path(env.outPath) / "bin" / "python3"
    script = ("import cv2, numpy as np\n"
              "assert cv2.cuda.getCudaEnabledDeviceCount() == 0\n"
              "a = np.arange(64, dtype=np.float32).reshape(8, 8)\n"
              "b = cv2.GaussianBlur(a, (3, 3), 0)\n"
              "assert abs(float(b.sum()) - float(a.sum())) < 1e-3 * float(a.sum())\n"
              "print(cv2.__version__, cv2.__file__)\n")
    done = subprocess.run(["env", "-i", str(python), "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("4.11.0 ") and done.stdout.split()[1].startswith(store_dir)
    opencv = pkgs.opencv_cpu_python
    core = Path(opencv.outPath) / "lib" / "libopencv_core.so.4.11.0"
    runpath = subprocess.run(["readelf", "-d", str(core)], capture_output=True, text=True).stdout
    assert "/usr/local/cuda" not in runpath and "cuda" not in runpath
