"""torchvision, torchaudio, onnxruntime, jax-cuda12-* and cupy-cuda12x: paired with each set, broken with the
reason where a set cannot have them, their tests; and the Python dependency's library directories that serve
a wheel's DT_NEEDED (issue 31, part 2).  Evaluation only: nothing is downloaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.errors import CudapkgsError
from cudapkgs.hooks.python_lib_dirs import python_lib_dirs


def _pkgs(tmp_path: Path, **extra):
    return cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "fetchers": ["wheels"], "allowUnfree": True,
                                        "prebuiltWheels": ["nccl", "libnvshmem"], **extra})


def _ps(pkgs, set_name: str):
    return pkgs[set_name].pkgs.pkgsCuda.python3Packages


@pytest.mark.parametrize("set_name, torch, vision, audio", [
    ("cudaPackages_13_0", "2.14.1", "0.29.1", "2.11.1"),
    ("cudaPackages_12_9", "2.9.1", "0.24.1", "2.9.1"),
])
def test_torchvision_and_torchaudio_are_the_pair_of_the_sets_torch(tmp_path, manifests_dir, set_name, torch, vision,
                                                                   audio):
    ps = _ps(_pkgs(tmp_path), set_name)
    assert ps.torch.version == torch
    for name, version in (("torchvision", vision), ("torchaudio", audio)):
        package = ps[name]
        assert package is ps[f"{name}-bin"] and package.version == version and package.meta.available
        # the set's torch is among its inputs (propagated), and its cudart the set's
        drv = package.derivation
        assert ps.torch.drvPath in {d.drv_path for d in drv.deps}
        assert str(ps.torch.cudaPackages.cuda_cudart.lib) in str(package.drvAttrs["buildInputs"])
        assert package.passthru.torch is ps["torch-bin"]
    assert ps.pillow.version == "12.1.0" and ps.pillow.drvPath in {d.drv_path for d in ps.torchvision.derivation.deps}


def test_a_companion_whose_torch_is_broken_names_the_torch_and_the_sets_that_have_it(tmp_path, manifests_dir):
    ps = _ps(_pkgs(tmp_path), "cudaPackages_12_6")  # torch 2.9.1 is a CUDA 12.8 build: 12.6 cannot serve it
    for name in ("torchvision", "torchaudio"):
        assert not ps[name].meta.available
        with pytest.raises(CudapkgsError, match=rf"python3Packages.torch 2.9.1 is available .*which {name} \S+ needs "
                                                r"\(sets that have it: cudaPackages_12_8, cudaPackages_12_9\)"):
            ps[name].drvPath


def test_onnxruntime_loads_the_sets_cuda_and_torchs_cudnn_and_says_why_no_tensorrt(tmp_path, manifests_dir):
    pkgs = _pkgs(tmp_path)
    ps = _ps(pkgs, "cudaPackages_13_0")
    ort = ps.onnxruntime
    assert ort.version == "1.31.1" and ort.meta.available
    cuda = pkgs.cudaPackages_13_0
    runpaths = ort.drvAttrs["appendRunpaths"]
    # cuDNN (dlopened) is the one torch uses: one cuDNN in a process with both
    assert f"{ps.torch.cudnn.lib}/lib" in runpaths and f"{cuda.libcufft.lib}/lib" in runpaths
    assert ort.drvAttrs["pythonRemoveDeps"] == ["flatbuffers", "protobuf"]
    # with wheels alone the set's TensorRT is unavailable: its provider's two libraries are left to fail alone
    assert ort.drvAttrs["autoPatchelfIgnoreMissingDeps"] == ["libnvinfer.so.10", "libnvonnxparser.so.10"]
    assert "tensorrt" in ort.tensorrtProvider and "not available" in ort.tensorrtProvider
    assert "TensorRT provider: " in ort.meta["longDescription"]
    with pytest.raises(CudapkgsError, match=r"onnxruntime-gpu 1.31.1 is a CUDA 13.0 build; cudaPackages_12_9 is CUDA "
                                            r"12.9 \(sets that have it: cudaPackages_13_0"):
        _ps(pkgs, "cudaPackages_12_9").onnxruntime.drvPath


def test_cuda12_sets_get_jax_cuda12_and_cupy_cuda12x(tmp_path, manifests_dir):
    pkgs = _pkgs(tmp_path)
    ps = _ps(pkgs, "cudaPackages_12_9")
    tag = "cp" + str(ps.pythonVersion).replace(".", "")
    assert ps.cupy.drvAttrs["wheel"]["file"] == f"cupy_cuda12x-14.2.0-{tag}-{tag}-manylinux2014_x86_64.whl"
    plugin, pjrt = ps["jax-cuda12-plugin"], ps["jax-cuda12-pjrt"]
    assert plugin.meta.available and pjrt.meta.available
    assert pjrt.drvAttrs["wheel"]["file"] == "jax_cuda12_pjrt-0.10.2-py3-none-manylinux_2_27_x86_64.whl"
    # XLA looks at $ORIGIN/../nvidia/cuda_nvcc: the set's ptxas (cuda_nvcc_wheel's with wheels alone)
    links = pjrt.drvAttrs["wheelLinks"]
    assert "cuda_nvcc_wheel" in str(links["jax_plugins/nvidia/cuda_nvcc/bin/ptxas"][0])
    assert pjrt.drvAttrs["wheelSubstitutions"][0]["file"] == "jax_plugins/xla_cuda12/__init__.py"
    with pytest.raises(CudapkgsError, match=r"jax-cuda12-plugin 0.10.2 is a CUDA 12 build; cudaPackages_13_0 is CUDA "
                                            r"13.0 \(use cudaPackages_12_9.pkgs"):
        _ps(pkgs, "cudaPackages_13_0")["jax-cuda12-plugin"].drvPath
    assert "cupy_cuda13x" in _ps(pkgs, "cudaPackages_13_0").cupy.drvAttrs["wheel"]["file"]


def test_companion_tests_need_a_gpu_only_for_the_gpu_ones(tmp_path, manifests_dir):
    ps = _ps(_pkgs(tmp_path), "cudaPackages_13_0")
    for name, cpu in (("torchvision", "cpu"), ("torchaudio", "cpu"), ("onnxruntime", "cpu")):
        tests = ps[name].tests
        assert "requiredSystemFeatures" not in tests[cpu].drvAttrs
        (gpu,) = tests["cuda"].values()
        assert gpu.drvAttrs["requiredSystemFeatures"] == ["cuda"]
        assert ps[name].drvPath in {d.drv_path for d in gpu.derivation.deps}
    assert "CUDAExecutionProvider" in ps.onnxruntime.tests["cpu"].drvAttrs["script"]
    for name in ("jax-cuda13-plugin", "cupy"):  # JAX's and CuPy's, which had none
        tests = ps[name].tests
        assert "requiredSystemFeatures" not in tests["cpu"].drvAttrs
        assert tests["cuda"]["gpu"].drvAttrs["requiredSystemFeatures"] == ["cuda"]
    assert ps.jax.drvPath in {d.drv_path for d in ps["jax-cuda13-plugin"].tests["cpu"].derivation.deps}
    assert "jax-cuda12-plugin" in str(_ps(_pkgs(tmp_path), "cudaPackages_12_9")["jax-cuda12-plugin"].tests["cpu"].name)


def test_python_lib_dirs_are_the_library_directories_of_the_dependencies_site_packages(tmp_path):
    torch = tmp_path / "torch-out"
    site = torch / "lib" / "python3.12" / "site-packages"
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "lib" / "libc10.so").write_bytes(b"\x7fELF")
    (site / "torch" / "_C").mkdir()
    (site / "torch" / "_C" / "_ext.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")  # a module, no library
    (site / "numpy.libs").mkdir()
    (site / "numpy.libs" / "libscipy_openblas64_-4b78795a.so").write_bytes(b"")
    (site / "torch" / "lib" / "__pycache__").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "libevil.so.1").write_bytes(b"")
    (site / "linked").symlink_to(elsewhere)  # never followed
    (site / "torch" / "lib" / "libfake.so.2").symlink_to(elsewhere / "libevil.so.1")
    deep = site / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "libdeep.so").write_bytes(b"")  # four levels down: beyond MAX_DEPTH
    other = tmp_path / "other-python" / "lib" / "python3.11" / "site-packages" / "x"
    other.mkdir(parents=True)
    (other / "libother.so").write_bytes(b"")  # another interpreter's tree
    found = python_lib_dirs([torch, tmp_path / "other-python", tmp_path / "missing"], "3.12")
    assert found == [site / "numpy.libs", site / "torch" / "lib"]
    linked_site = tmp_path / "linked-out" / "lib" / "python3.12"
    linked_site.mkdir(parents=True)
    (linked_site / "site-packages").symlink_to(site)
    assert python_lib_dirs([tmp_path / "linked-out"], "3.12") == []
