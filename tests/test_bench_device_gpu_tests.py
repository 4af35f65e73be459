"""bench/device/pack_gpu_tests.py splits what the GPU machine's `cudapkgs test` needs into what is built here
(portable: the same store path under another host compiler) and what the device builds (it compiles); and
check_opencv_torch.py's reading of /proc/self/maps. Evaluation only: nothing is built or downloaded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "device"))
import check_opencv_torch  # noqa: E402
import pack_gpu_tests  # noqa: E402

PYTHON = Path(pack_gpu_tests.PYTHON)


@pytest.mark.skipif(not PYTHON.is_file(), reason=f"{PYTHON} (the device's CPython 3.12.1, pyenv's) is not here")
def test_the_split_builds_what_compiles_on_the_device_and_carries_the_rest(tmp_path, capsys, manifests_dir):
    # torch, cuDNN and the OpenCV sources are the same paths under the device's GCC 13.3: built here, carried;
    # cuda_nvcc (its profile names the compiler), OpenCV and the tests' builds are the device's, and the only
    # wheel those need there is nvcc's.
    code = pack_gpu_tests.main(["--store", str(tmp_path / "store"), "--dry-run",
                                "cudaPackages_13_0.pkgs.pkgsCuda.python312Packages.torch",
                                "cudaPackages_13_0.tests.nvcc-runtime"])
    out = capsys.readouterr().out
    assert code == 0, out
    there = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert "cuda13.0-cuda_nvcc-13.0.88" in there and any(n.startswith("gcc-wrapper-") for n in there)
    assert "cuda13.0-tests-nvcc-runtime-gpu" in there and any(n.startswith("opencv-") for n in there)
    assert not any(n.startswith(("torch-2", "cuda13.0-cudnn", "cuda13.0-libcublas")) for n in there), there
    assert "wheels for the device's builds: nvidia-cuda-nvcc==13.0.88" in out
    # the fake compiler was only for the first evaluation: the environment is as it was
    assert "device-gcc-" not in os.environ.get("PATH", "") and "device-gcc-" not in os.environ.get("CC", "")


def test_store_of_names_the_store_directory_and_refuses_other_paths(tmp_path):
    store = tmp_path / "s" / "store"
    path = store / ("a" * 32 + "-torch-2.14.1") / "lib" / "torch" / "__init__.py"
    assert check_opencv_torch.store_of(str(path)) == str(store)
    with pytest.raises(SystemExit, match="not in a store"):
        check_opencv_torch.store_of("/usr/lib/python3/dist-packages/torch/__init__.py")


def test_mapped_libraries_lists_each_mapped_library_once():
    found = check_opencv_torch.mapped_libraries()
    assert found and len(found) == len(set(found))
    assert any(os.path.basename(p).startswith(("libc.so", "libc-")) for p in found), found
