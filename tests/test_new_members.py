"""The products and members issue 21 added: each new product's components in every set, their
availability and inputs as Nixpkgs' expressions give them, and that nothing new is read unless used.

Versions: pkgs/top-level/cuda-packages.nix@c12d1f6869b8d0656a6494fe08d9d11e95e25df5 (NixOS/nixpkgs);
expressions: pkgs/development/cuda-modules/packages/<name>.nix at the commit named beside each test.
"""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs import manifests as m
from cudapkgs.licenses import math_sdk_sla, nvidiaCuda
from cudapkgs.package_sets import package_set_definitions

# product -> (manifest version, component -> its version in that manifest)
NEW = {
    "cublasmp": ("0.10.0", {"libcublasmp": "0.10.0.3695"}),
    "cuquantum": ("26.09.0", {"cuquantum": "26.09.0.8"}),
    "cusolvermp": ("0.9.1", {"libcusolvermp": "0.9.1.9318"}),
    "nppplus": ("0.10.0", {"libnpp_plus": "0.10.0.0"}),
    "nvcomp": ("5.3.0", {"nvcomp": "5.3.0.16"}),
    "nvjpeg2000": ("0.11.0", {"libnvjpeg_2k": "0.11.0.51"}),
    "nvtiff": ("0.8.0", {"libnvtiff": "0.8.0.82"}),
    "nvpl": ("26.5", {"nvpl_blas": "0.6.0", "nvpl_common": "0.3.5", "nvpl_fft": "0.6.0.1", "nvpl_lapack": "0.4.0.1",
                      "nvpl_rand": "0.5.4", "nvpl_scalapack": "0.2.4", "nvpl_sparse": "0.6.0", "nvpl_tensor": "0.3.3"}),
}


def _pkgs(tmp_path, system="x86_64-linux", **config):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"),
                                       # the from-source members as Nixpkgs builds them (prebuiltWheels defaults to libnvshmem)
                                       "prebuiltWheels": [], **config}, system=system)


def test_every_set_pins_the_new_products_as_nixpkgs(manifests_dir):
    for name, definition in package_set_definitions().items():
        for product, (version, _) in NEW.items():
            assert [c.version for c in definition.products[product]] == [version], (name, product)


@pytest.mark.parametrize("set_name", ["cudaPackages_12_6", "cudaPackages_13_4"])
def test_new_components_are_members_with_their_manifest_versions(manifests_dir, tmp_path, set_name):
    cuda = _pkgs(tmp_path)[set_name]
    for product, (_, components) in NEW.items():
        for pname, version in components.items():
            package = cuda[pname]
            assert package.redistName == product and package.version == version, pname
            assert package.name == f"{cuda.cudaNamePrefix}-{pname}-{version}"


def test_availability_follows_the_manifests(manifests_dir, tmp_path):
    x86 = _pkgs(tmp_path)
    for pname in ("cuquantum", "libcusolvermp", "nvcomp", "libnvjpeg_2k", "libnvtiff"):
        assert x86.cudaPackages_13_0[pname].meta.available, pname
    # NPP+ 0.10.0 has cuda11 and cuda12 builds only (libnpp_plus.nix@0e98746a; nppplus manifest)
    assert x86.cudaPackages_12_9.libnpp_plus.meta.available
    npp13 = x86.cudaPackages_13_0.libnpp_plus
    assert not npp13.meta.available and npp13.src is None
    assert "the manifest has cuda11, cuda12" in npp13.meta.problems["unsupported"]["message"]
    # NVPL is for Arm server CPUs: linux-sbsa only
    assert not x86.cudaPackages_13_0.nvpl_blas.meta.available
    sbsa = _pkgs(tmp_path, "aarch64-linux").cudaPackages_13_0
    assert sbsa.backendStdenv.hostRedistSystem == "linux-sbsa"
    assert sbsa.nvpl_blas.meta.available and sbsa.nvpl_blas.src.redistSystem == "linux-sbsa"
    # cuBLASMp 0.10.0 ships no CAL (libcal/default.nix@8ed650e3 reads it from the cublasmp manifest)
    libcal = x86.cudaPackages_13_0.libcal
    assert libcal.version == "0-unsupported" and not libcal.meta.available
    assert "libcal is in the cublasmp 0.10.0 manifest" in libcal.meta.problems["unsupported"]["message"]


def test_new_components_inputs(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    # libcublasmp.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b
    assert cuda.libcublasmp.propagatedBuildInputs == [cuda.libcublas, cuda.nccl]
    assert cuda.libcublasmp.buildInputs == [cuda.libnvshmem]
    assert cuda.libcublasmp.meta.license == [math_sdk_sla]
    assert cuda.libcublasmp.autoPatchelfIgnoreMissingDeps == ["libcuda.so.1"]
    # libnvshmem is built here from source and broken (no mpi, libfabric, pmix, ucx): libcublasmp says so
    assert not cuda.libnvshmem.meta.available
    assert not cuda.libcublasmp.meta.available
    assert "- libnvshmem is available" in cuda.libcublasmp.meta.problems["broken"]["message"]
    assert "nccl is available" not in cuda.libcublasmp.meta.problems["broken"]["message"]
    # libcusolvermp.nix@c5f596dc518aad3f5db1a6330da33cc34df90ce3
    assert cuda.libcusolvermp.buildInputs == [cuda.cuda_cudart, cuda.libcublas, cuda.libcusolver, cuda.nccl]
    # cuquantum.nix@51df369461246392638e74eaec3925a089e06def
    assert cuda.cuquantum.buildInputs == [cuda.cuda_cudart, cuda.cuda_nvml_dev, cuda.libcublas, cuda.libcurand,
                                          cuda.libcusolver, cuda.libcutensor]
    assert "cuda_nvml_dev.stubs" in cuda.cuquantum.inputDerivations
    # NVPL (buildNvpl): lapack and tensor propagate blas, scalapack blas and lapack
    sbsa = _pkgs(tmp_path, "aarch64-linux").cudaPackages_13_0
    assert sbsa.nvpl_lapack.propagatedBuildInputs == [sbsa.nvpl_blas]
    assert sbsa.nvpl_scalapack.propagatedBuildInputs == [sbsa.nvpl_blas, sbsa.nvpl_lapack]
    assert sbsa.nvpl_common.outputs == ["out", "dev"]
    # buildRedist's default licence for a product other than cuda
    assert cuda.nvcomp.meta.license == [nvidiaCuda]


def test_new_products_are_read_only_when_used(manifests_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(m.locate, "_PARSED", {})
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    assert cuda.cudnn.version == "9.22.0.52"
    assert cuda.libcublas.version == "13.1.1.3"
    read = {manifest.product for manifest in m.locate._PARSED.values()}
    assert read == {"cuda", "cudnn"}
    assert cuda.nvcomp.version == "5.3.0.16"
    assert {manifest.product for manifest in m.locate._PARSED.values()} == {"cuda", "cudnn", "nvcomp"}
