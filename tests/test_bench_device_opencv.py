"""bench/device/pack_opencv.py carries only what does not depend on the machine that builds.

The GPU machine has another host gcc (Ubuntu's 13.3) than this one (Debian's 12.2). cuda_nvcc's derivation
records the host compiler and the stdenv's gcc-wrapper its identity, so their store paths, and those of
everything built after them, differ between the two machines: carrying their outputs is useless there.
Fixed-output derivations (sources, pinned wheels) name only their name and hash, so they are the same on
both; NVIDIA's wheels are picked by project and version. Evaluated here with two fake gcc's (scripts that
answer the ``-dM -E`` probe), nothing built.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "device"))
import pack_opencv  # noqa: E402


def _fake_gcc(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    major = version.split(".")[0]
    body = f"#!/bin/sh\necho '#define __GNUC__ {major}'\necho '#define __VERSION__ \"{version}\"'\n"
    for name in (f"gcc-{major}", f"g++-{major}"):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory / f"gcc-{major}"


def _evaluate(tmp_path: Path, monkeypatch, gcc_version: str):
    bin_dir = tmp_path / f"bin-{gcc_version}"
    cc = _fake_gcc(bin_dir, gcc_version)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.delenv("CXX", raising=False)
    cfg = pack_opencv.config(str(tmp_path / "store"), sys.executable, [])
    return pack_opencv.evaluate(pack_opencv.ATTR, cfg)


def _by_name(drv) -> dict[str, str]:
    return {d.name: d.outputs[next(iter(d.outputs))] for d in drv.closure()}


def test_only_fixed_inputs_are_carried_and_they_do_not_depend_on_the_host_compiler(manifests_dir, tmp_path,
                                                                                    monkeypatch):
    here = _evaluate(tmp_path, monkeypatch, "12.2.0")
    there = _evaluate(tmp_path, monkeypatch, "13.3.0")
    # The flaw of carrying built outputs: nvcc records the compiler, the stdenv's wrapper too, and OpenCV
    # (built with both) follows; so their paths on the GPU machine are not the carried ones.
    a, b = _by_name(here), _by_name(there)
    assert "gcc-wrapper-12.2.0" in a and "gcc-wrapper-13.3.0" in b
    assert a["cuda13.0-cuda_nvcc-13.0.88"] != b["cuda13.0-cuda_nvcc-13.0.88"]
    assert a["opencv-4.11.0"] != b["opencv-4.11.0"]
    # What is carried is the same on both machines.
    fixed_here, wheels_here = pack_opencv.carried(here)
    fixed_there, wheels_there = pack_opencv.carried(there)
    assert [d.outputs["out"] for d in fixed_here] == [d.outputs["out"] for d in fixed_there]
    assert wheels_here == wheels_there
    # ... and it is what the task needs: the two OpenCV trees and zlib's source, numpy's wheel; nothing built.
    assert all(d.is_fixed_output for d in fixed_here)
    builders = sorted(d.builder for d in fixed_here)
    assert builders == ["fetchFromGitHub", "fetchFromGitHubOrSdist", "fetchFromGitHubOrSdist", "fetchPypi"], builders
    assert any(d.name.startswith("numpy-") and d.name.endswith(".whl") for d in fixed_here)
    assert not any(d.builder in ("buildRedist", "mkDerivation") for d in fixed_here)
    projects = {p for p, _ in wheels_here}
    assert {"nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cublas", "nvidia-npp"} <= projects, projects
    assert ("nvidia-cuda-nvcc", "13.0.88") in wheels_here


def test_a_component_without_a_wheel_is_refused_before_anything_is_packed(manifests_dir, tmp_path, monkeypatch):
    from cudapkgs.errors import FetchError

    drv = _evaluate(tmp_path, monkeypatch, "12.2.0")
    nvcc = next(d for d in drv.closure() if d.name.startswith("cuda13.0-cuda_nvcc"))
    # a buildRedist component whose product NVIDIA has no PyPI project for
    monkeypatch.setitem(nvcc.attrs, "redistName", "no-such-product")
    with pytest.raises(FetchError, match="no wheel"):
        pack_opencv.carried(drv)
