"""What the ML stack needs from the sets (issue 20, part 4): cudart without nvcc on CUDA 12, libcusparse_lt
from NVIDIA's wheels, versioned cuDNN members, and NCCL/NVSHMEM from NVIDIA's wheel by one configuration key."""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs.errors import ConfigError
from cudapkgs.fetch.wheels import pypi_name, wheel_for


@pytest.fixture
def pkgs(manifests_dir):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"]})


def test_cuda12_cudart_propagates_crt_headers_not_nvcc(pkgs):
    # cuda_cudart.nix@e944ac95: no cuda_nvcc (disallowedRequisites); CUDA 12's nvcc wheel has no nvcc, so
    # propagating it made cudart unbuildable from wheels (issue 21). The headers come from cuda_crt.
    for name in ("cudaPackages_12_6", "cudaPackages_12_9", "cudaPackages_13_0"):
        cudart = pkgs[name].cuda_cudart
        inputs = cudart.inputDerivations
        assert not any(key.startswith("cuda_nvcc.") for key in inputs), (name, list(inputs))
        assert "cuda_crt.out" in inputs
    crt = pkgs.cudaPackages_12_9.cuda_crt
    assert crt.version == pkgs.cudaPackages_12_9.cuda_nvcc.version  # nvcc's release below 13.0
    assert pypi_name("cuda", "cuda_crt", 12) == "nvidia-cuda-nvcc-cu12"
    assert pypi_name("cuda", "cuda_crt", 13) == "nvidia-cuda-crt"


def test_cusparselt_comes_from_nvidias_wheels(pkgs):
    # nvidia-cusparselt-cu12 0.6.3/0.7.1/0.8.1 and -cu13 0.10.0 exist (pip index versions): the wheel's version
    # drops the manifest's fourth number.
    assert pypi_name("cusparselt", "libcusparse_lt", 13) == "nvidia-cusparselt-cu13"
    assert pypi_name("cusparselt", "libcusparse_lt", 12) == "nvidia-cusparselt-cu12"
    for set_name, wheel in (("cudaPackages_12_8", "0.7.1"), ("cudaPackages_12_9", "0.8.1"), ("cudaPackages_13_0", "0.10.0")):
        lt = pkgs[set_name].libcusparse_lt
        assert wheel_for("cusparselt", "libcusparse_lt", int(set_name[13:15]), lt.version)[1] == wheel
    assert wheel_for("cuda", "libcublas", 13, "13.1.1.3") == ("nvidia-cublas", "13.1.1.3")


def test_plan_names_the_cusparselt_wheel(pkgs, tmp_path):
    from cudapkgs.fetch.planning import choose_source

    lt = pkgs.cudaPackages_13_0.libcusparse_lt
    choice = choose_source(lt.derivation.attrs, lt.derivation.data["src"], ["wheels"], tmp_path)
    assert choice.fetcher == "wheels" and choice.what == "nvidia-cusparselt-cu13==0.10.0"


def test_every_cudnn_release_with_a_manifest_is_a_member(pkgs):
    cuda = pkgs.cudaPackages_13_0
    members = sorted(n for n in cuda if n.startswith("cudnn_") and n[6:].replace("_", "").isdigit())
    assert members == ["cudnn_8_9", "cudnn_9_13", "cudnn_9_22", "cudnn_9_27"]
    assert cuda.cudnn.version == "9.22.0.52"  # the set's own, as the seeds fix it
    assert cuda.cudnn_9_22.drvPath == cuda.cudnn.drvPath
    newer = cuda.cudnn_9_27
    assert newer.version == "9.27.0.42" and newer.name == "cuda13.0-cudnn-9.27.0.42"
    assert newer.src.relativePath.endswith("cudnn-linux-x86_64-9.27.0.42_cuda13-archive.tar.xz")
    assert newer.drvPath != cuda.cudnn.drvPath and newer.meta.available
    assert not cuda.cudnn_8_9.meta.available  # no CUDA 13 build of cuDNN 8.9: said in meta.problems
    assert "no CUDA variant matches" in cuda.cudnn_8_9.meta.problems["unsupported"]["message"]


def test_prebuilt_wheels_key_swaps_nccl_and_nvshmem_for_nvidias_wheels(manifests_dir):
    source = cudapkgs.import_pkgs(config={"allowUnfree": True, "prebuiltWheels": []}).cudaPackages_13_0
    wheel = cudapkgs.import_pkgs(config={"allowUnfree": True, "prebuiltWheels": ["nccl", "libnvshmem"]}).cudaPackages_13_0
    assert source.nccl.drvAttrs.get("nvidiaWheel") is None
    assert wheel.nccl.version == source.nccl.version == "2.30.7-1"
    assert wheel.nccl.drvAttrs["nvidiaWheel"] == {"project": "nvidia-nccl-cu13", "version": "2.30.7", "cudaMajor": 13}
    assert wheel.nccl.outputs == ["out", "dev"] and wheel.nccl.meta.available
    assert wheel.libnvshmem.drvAttrs["nvidiaWheel"]["project"] == "nvidia-nvshmem-cu13"
    assert "lib/nvshmem_bootstrap_mpi.so.3" in wheel.libnvshmem.drvAttrs["wheelRemove"]
    # The source build of NVSHMEM needs MPI, UCX, libfabric and PMIx: broken here, and it says so.
    assert not source.libnvshmem.meta.available and "mpi is available" in str(source.libnvshmem.meta.problems)
    assert wheel.libnvshmem.meta.available
    # Only the names the key lists change.
    assert cudapkgs.import_pkgs(config={"allowUnfree": True}).cudaPackages_13_0.nccl.drvPath == source.nccl.drvPath


def test_an_unknown_prebuilt_name_is_one_line_naming_the_known_ones(manifests_dir):
    with pytest.raises(ConfigError) as error:
        cudapkgs.import_pkgs(config={"prebuiltWheels": ["ncl"]})
    message = str(error.value)
    assert "\n" not in message and '"ncl"' in message and "libnvshmem, nccl" in message and 'did you mean "nccl"' in message


def test_config_names_match_the_prebuilt_table():
    from cudapkgs.config import PREBUILT_WHEEL_NAMES
    from cudapkgs.cuda.prebuilt import PREBUILT

    assert sorted(PREBUILT) == sorted(PREBUILT_WHEEL_NAMES)
