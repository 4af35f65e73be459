"""Redist packages' propagated dependencies and non-CUDA inputs, at evaluation (no downloads)."""

from __future__ import annotations

import pytest

import cudapkgs


@pytest.fixture
def cuda(tmp_path, manifests_dir):
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "allowUnfree": True,
                                        "cudaSupport": True, "cudaCapabilities": ["9.0"]})
    return pkgs, pkgs.cudaPackages_13_0


def test_libcublas_propagates_cuda_cudart(cuda):
    # libcublas.nix (Nixpkgs, see data/redist_components.toml): propagatedBuildInputs = [ cuda_cudart ].
    _, set_ = cuda
    attrs = set_.libcublas.derivation.attrs
    assert attrs["propagatedBuildInputs"] == [set_.cuda_cudart.out]
    assert "propagatedBuildInputs" not in set_.cuda_nvrtc.derivation.attrs  # nothing to propagate


def test_cudnn_takes_zlib_from_the_top_level(cuda):
    pkgs, set_ = cuda
    inputs = set_.cudnn.derivation.data["inputs"]
    assert inputs["zlib.out"] == pkgs.zlib.out
    assert pkgs.zlib.derivation in set_.cudnn.derivation.deps


@pytest.mark.parametrize("set_name", ["cudaPackages_12_6", "cudaPackages_12_8", "cudaPackages_13_0", "cudaPackages_13_4"])
def test_cuda_cudart_propagates_nvccs_headers_not_nvcc(tmp_path, manifests_dir, set_name):
    # cuda_cudart.nix@e944ac95: nvcc's headers are propagated only as an output of their own, and
    # `disallowedRequisites = [ (lib.getBin cuda_nvcc) ]` (NixOS/nixpkgs#457424); cuda_nvcc's only
    # output is out (cuda_nvcc/package.nix@1ac181a1), so `getOutput "include" cuda_nvcc` would be all
    # of nvcc. The headers are cuda_crt: below 13.0 nvcc's archive without bin, lib, lib64, nvvm
    # (cuda_crt/package.nix@613b8b48). Before this, a CUDA 12 cudart propagated (and was built
    # after) all of cuda_nvcc, whose CUDA 12 wheel has no nvcc.
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "allowUnfree": True})
    set_ = pkgs[set_name]
    cudart = set_.cuda_cudart.derivation
    propagated = cudart.attrs["propagatedBuildInputs"]
    assert set_.cuda_crt.out in propagated
    assert set_.cuda_nvcc.out not in propagated
    assert set_.cuda_nvcc.derivation not in cudart.deps
    assert set_.cuda_crt.derivation in cudart.deps
