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
