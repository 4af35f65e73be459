"""meta of the redistributable packages: Nixpkgs' words, verbatim, and nothing without a source.

Expected values are copied from NixOS/nixpkgs, pkgs/development/cuda-modules/packages/<file>@<commit>
(named above each case); the table records the same file and commit per component.
"""

from __future__ import annotations

import re

import pytest

import cudapkgs
from cudapkgs import licenses
from cudapkgs.cuda.components import _load_table, component_specs

NIXPKGS_FILE = re.compile(r"^pkgs/development/cuda-modules/packages/[A-Za-z0-9_./-]+\.nix$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture
def cuda(manifests_dir, tmp_path):
    store = tmp_path / "store"
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(store)},
                                system="x86_64-linux").cudaPackages_13_0


# (attribute, description, homepage, mainProgram); None = the expression does not set it.
SAMPLE = [
    # cuda_nvcc/package.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb
    ("cuda_nvcc", "CUDA compiler driver", "https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc", "nvcc"),
    # cuda_cuobjdump.nix@3f22e386be8e1125f74f8f1507ecac887ffda3a1
    ("cuda_cuobjdump",
     "Extracts information from CUDA binary files (both standalone and those embedded in host binaries) and "
     "presents them in human readable format",
     "https://docs.nvidia.com/cuda/cuda-binary-utilities#cuobjdump", "cuobjdump"),
    # cuda_cudart.nix@024ef1dc3076208119baaee8a2babec574573291: meta.description only
    ("cuda_cudart", "CUDA Runtime", None, None),
    # cuda_profiler_api.nix@f659a082e268cb78f079e0c2edd7b79205f828d4: meta.description only
    ("cuda_profiler_api", "API for profiling CUDA runtime", None, None),
    # libcublas.nix@484dd1d0bd718db5025dd87bf7e5c1be183971fa
    ("libcublas", "CUDA Basic Linear Algebra Subroutine library", "https://developer.nvidia.com/cublas", None),
    # libcurand.nix@0c9f4de09e03f07bde712eee6ea5726de8ad614c: Nixpkgs' text, although it is libcal's
    ("libcurand",
     "Helper module for the cuBLASMp library that allows it to efficiently perform communications between "
     "different GPUs",
     "https://developer.nvidia.com/curand", None),
    # nsight_compute.nix@13d8aa4399714042ab223e32e7704ed6a2f04400
    ("nsight_compute", "Interactive profiler for CUDA and NVIDIA OptiX", "https://developer.nvidia.com/nsight-compute",
     "ncu"),
    # fabricmanager.nix@ec457688a9eb973842ff658a1eeb68013cea2d79: meta.homepage only
    ("fabricmanager", None, "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide", None),
    # cuda_crt/package.nix@613b8b48f7d48ff70985b390e366975eede57415: no meta at all
    ("cuda_crt", None, None, None),
    # libcusparse_lt.nix@613b8b48f7d48ff70985b390e366975eede57415
    ("libcusparse_lt",
     "High-performance CUDA library dedicated to general matrix-matrix operations in which at least one operand "
     "is a structured sparse matrix with 50% sparsity ratio",
     "https://developer.nvidia.com/cusparselt-downloads", None),
    # libcutensor.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b
    ("libcutensor",
     "GPU-accelerated tensor linear algebra library for tensor contraction, reduction, and elementwise operations",
     "https://developer.nvidia.com/cutensor", None),
    # tensorrt.nix@024ef1dc3076208119baaee8a2babec574573291
    ("tensorrt", "SDK that facilitates high-performance machine learning inference",
     "https://developer.nvidia.com/tensorrt", None),
]


@pytest.mark.parametrize(("attr", "description", "homepage", "main_program"), SAMPLE, ids=[s[0] for s in SAMPLE])
def test_meta_is_nixpkgs_verbatim(cuda, attr, description, homepage, main_program):
    meta = cuda[attr].meta
    assert meta.get("description") == description
    assert meta.get("homepage") == homepage
    assert meta.get("mainProgram") == main_program


# libcusparse_lt.nix@613b8b48 license = lib.licenses.nvidiaCusparse_lt; libcutensor.nix@1dbbce67
# license = lib.licenses.nvidiaCutensor; tensorrt.nix@024ef1dc license = _cuda.lib.licenses.tensorrt;
# cuda_nvcc/package.nix@1ac181a1 sets none: buildRedist/default.nix@53159da0 defaults the CUDA ones to nvidiaCudaRedist.
@pytest.mark.parametrize(("attr", "name"), [("libcusparse_lt", "nvidiaCusparse_lt"),
                                            ("libcutensor", "nvidiaCutensor"),
                                            ("tensorrt", "tensorrt"),
                                            ("cuda_nvcc", "nvidiaCudaRedist")])
def test_licenses_as_nixpkgs(cuda, attr, name):
    assert cuda[attr].meta.license == [licenses.LICENSES_BY_NAME[name]]  # buildRedist: a list


def test_every_description_has_a_nixpkgs_source():
    """No description, homepage or mainProgram without the Nixpkgs file and commit it was copied from."""
    unsourced, checked = [], 0
    for product, entries in _load_table().items():
        for name, entry in entries.items():
            if not any(key in entry for key in ("description", "homepage", "main_program", "license")):
                continue
            checked += 1
            if not (NIXPKGS_FILE.match(entry.get("source", "")) and COMMIT.match(entry.get("commit", ""))):
                unsourced.append(f"{product}.{name}: source={entry.get('source')!r} commit={entry.get('commit')!r}")
    assert unsourced == []
    assert checked >= 45  # the table's 60 entries, less those whose expression sets no meta


def test_no_description_is_invented(cuda):
    """A package whose expression sets no meta.description has none (no made-up "NVIDIA <pname>")."""
    without = [name for name, spec in component_specs()["cuda"].items()
               if not spec.description and spec.alias_of is None and name in cuda]
    assert "cuda_crt" in without and "libcudla" in without
    for name in without:
        assert "description" not in cuda[name].meta, name
