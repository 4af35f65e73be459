"""What the ML stack needs from the sets (issue 20, part 4): versioned cuDNN members, and NCCL/NVSHMEM from
NVIDIA's wheel by one configuration key (cudart without nvcc and libcusparse_lt's wheels: test_redist_propagation,
test_fetcher_supply)."""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs.errors import ConfigError


@pytest.fixture
def pkgs(manifests_dir):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"]})


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
    # Only the names the key lists change: NCCL from source as Nixpkgs is one key away (issue 31 made
    # both wheels the default, for the ML stack's first command).
    default = cudapkgs.import_pkgs(config={"allowUnfree": True}).cudaPackages_13_0
    assert default.nccl.drvPath == wheel.nccl.drvPath and default.libnvshmem.drvPath == wheel.libnvshmem.drvPath
    nixpkgs_nccl = cudapkgs.import_pkgs(config={"allowUnfree": True, "prebuiltWheels": ["libnvshmem"]}).cudaPackages_13_0
    assert nixpkgs_nccl.nccl.drvPath == source.nccl.drvPath
    assert nixpkgs_nccl.libnvshmem.drvPath == wheel.libnvshmem.drvPath


def test_an_unknown_prebuilt_name_is_one_line_naming_the_known_ones(manifests_dir):
    with pytest.raises(ConfigError) as error:
        cudapkgs.import_pkgs(config={"prebuiltWheels": ["ncl"]})
    message = str(error.value)
    assert "\n" not in message and '"ncl"' in message and "libnvshmem, nccl" in message and 'did you mean "nccl"' in message


def test_config_names_match_the_prebuilt_table():
    from cudapkgs.config import PREBUILT_WHEEL_NAMES
    from cudapkgs.cuda.prebuilt import PREBUILT

    assert sorted(PREBUILT) == sorted(PREBUILT_WHEEL_NAMES)
