"""Packages Nixpkgs builds from source, as members of every CUDA set.

Expected values are Nixpkgs' (NixOS/nixpkgs, pkgs/development/cuda-modules/packages/<file>@<commit>,
named above each test). Builds that need the source mirror read it from $CUDAPKGS_SOURCES (default
../shared/sources beside the checkout) and skip elsewhere; building NCCL itself takes far longer
than CI allows on two cores, so the NCCL build test runs only against a store that already holds
it ($CUDAPKGS_NCCL_STORE, see docs/nccl-h200.md) and is skipped with that reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.cuda.scope import FROM_SOURCE
from cudapkgs.pkgs.nccl.package import nccl_version
from cudapkgs.pkgs.substitute import SUBSTITUTE_IN_PLACE

SOURCES = Path(os.environ.get("CUDAPKGS_SOURCES", Path(__file__).resolve().parents[2] / "shared" / "sources"))
needs_sources = pytest.mark.skipif(
    not (SOURCES / "INDEX.md").is_file(),
    reason=f"the source mirror {SOURCES} is absent (set CUDAPKGS_SOURCES to the absolute path of ../shared/sources)",
)
SETS = ("cudaPackages_12_6", "cudaPackages_12_8", "cudaPackages_12_9", "cudaPackages_13_0", "cudaPackages_13_1",
        "cudaPackages_13_2", "cudaPackages_13_3", "cudaPackages_13_4")


def _pkgs(tmp_path, system="x86_64-linux", **config):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"),
                                       # the from-source members as Nixpkgs builds them (prebuiltWheels defaults to libnvshmem)
                                       "prebuiltWheels": [], **config},
                                system=system)


@pytest.fixture
def pkgs(manifests_dir, tmp_path):
    return _pkgs(tmp_path)


# Versions and hashes: nccl.nix@0145c6da2896513d94440e7fb41c11487aa3de16, nccl-tests.nix@0e4c430160f77d43619a4c8ae9b528dbc3b6c973,
# gdrcopy.nix@0b73a0c2114322292ae614235b7c50da19226483, matx.nix@c0a68d7659b50f25fcccc04515674acfc9d7cddc,
# cudnn-frontend/package.nix@342bcfe06818e9dd2a8a47fde0a2a06012fa65ff, libnvshmem.nix@ee7ded0ba23b65480c0f6823045ae0ee2f320806,
# cutlass.nix@371f570ea6cbbd2ef7c40bd7c24df2036431c5f1, cuda-samples.nix@2919d13e3b61b7f5e1da7556addab203206ab114
NIXPKGS = {
    "nccl": ("nccl", "2.30.7-1", "NVIDIA", "nccl", "v2.30.7-1", "sha256-fdiQZweX0jYfGroP0bL5Sfv3+DkCzVBZZLEbPv8aqq8="),
    "nccl-tests": ("nccl-tests", "2.18.2", "NVIDIA", "nccl-tests", "v2.18.2", "sha256-CFLCNtDxCq8WDqbPO6CI+cwBFtgk2RO2+J3tQs6iInY="),
    "gdrcopy": ("gdrcopy", "2.5.1", "NVIDIA", "gdrcopy", "v2.5.1", "sha256-2cDsDc1lGW9rNF1q3EhjmiJhNaIwuFYlNdooPe7/R2I="),
    "matx": ("MatX", "0.8.0", "NVIDIA", "MatX", "refs/tags/v0.8.0", "sha256-7ygdfo27tXz0f6jz6RwDCGwSQun3HqZJ9o6w2vKGM3s="),
    "cudnn-frontend": ("cudnn-frontend", "1.9.0", "NVIDIA", "cudnn-frontend", "v1.9.0", "sha256-Vc5jqB1XHcJEdKG0nxbWLewW2fDezRVwjUSzPDubSGE="),
    "libnvshmem": ("libnvshmem", "3.4.5-0", "NVIDIA", "nvshmem", "v3.4.5-0", "sha256-RHZzjDMYlL7vAVP1/UXM/Pt4bhajeWdCi3ihICeD2mc="),
    "cutlass": ("cutlass", "3.9.2", "NVIDIA", "cutlass", "v3.9.2", "sha256-teziPNA9csYvhkG5t2ht8W8x5+1YGGbHm8VKx4JoxgI="),
    "cuda-samples": ("cuda-samples", "12.8", "NVIDIA", "cuda-samples", "v12.8", "sha256-Ba0Fi0v/sQ+1iJ4mslgyIAE+oK5KO0lMoTQCC91vpiA="),
}


@pytest.mark.parametrize("attr", sorted(NIXPKGS))
def test_version_and_source_are_nixpkgs(pkgs, attr):
    pname, version, owner, repo, ref, hash_ = NIXPKGS[attr]
    package = pkgs.cudaPackages_13_0[attr]
    assert (package.pname, package.version) == (pname, version)
    assert package.name == f"cuda13.0-{pname}-{version}"
    src = package.src
    assert (src.owner, src.repo, src.name) == (owner, repo, "source")
    assert ref in (src.tag, src.rev)
    assert src.outputHash == hash_


def test_nccl_version_by_cuda_release():
    # nccl.nix@0145c6da: 2.30.7-1 from 12.0, 2.28.7-1 from 11.7, 2.26.6-1 from 11.6, else 2.25.1-1
    assert [nccl_version(v) for v in ("13.4", "12.0", "11.8", "11.7", "11.6", "11.5")] == [
        "2.30.7-1", "2.30.7-1", "2.28.7-1", "2.28.7-1", "2.26.6-1", "2.25.1-1"]


def test_every_member_evaluates_on_every_set_and_system(manifests_dir, tmp_path):
    for system in ("x86_64-linux", "aarch64-linux"):
        pkgs = _pkgs(tmp_path, system)
        for set_name in SETS:
            for attr in FROM_SOURCE:
                member = pkgs[set_name][attr]
                # cuda-library-samples.nix is a set of packages (cublas, cusolver, cutensor)
                packages = [member] if "derivation" in member else [member[k] for k in member if k != "override"]
                for package in packages:
                    assert package.name and package.version, (set_name, attr)
                    meta = package.meta
                    if hasattr(meta, "get") and meta.get("available") is False:
                        assert meta.get("problems"), (set_name, attr, "unavailable without a reason")
    # derivations too (the nccl closure: nvcc, cudart, cccl, the source) on two sets
    x86 = _pkgs(tmp_path)
    for set_name in ("cudaPackages_12_8", "cudaPackages_13_4"):
        assert x86[set_name].nccl.drvPath.endswith(f"-cuda{set_name[-4:].replace('_', '.')}-nccl-2.30.7-1.drv")


def test_nccl_build_as_nixpkgs(pkgs):
    cuda = pkgs.cudaPackages_12_8
    nccl = cuda.nccl
    assert nccl.outputs == ["out", "dev", "static"]
    flags = nccl.drvAttrs["makeFlags"]
    assert f"NVCC_GENCODE={cuda.flags.gencodeString}" in flags and "CXXSTD=-std=c++17" in flags
    assert f"CUDA_HOME={cuda.cuda_nvcc.outPath}" in flags and "PREFIX=$(out)" in flags
    assert "substituteInPlace ./makefiles/common.mk --replace-fail '-ccbin $(CXX)' ''" in nccl.drvAttrs["postPatch"]
    assert nccl.drvAttrs["disallowedReferences"] == [cuda.cuda_nvcc.outPath]
    assert nccl.meta.license.spdx_id == "BSD-3-Clause"
    assert nccl.meta.homepage == "https://developer.nvidia.com/nccl"


# nccl.nix@0145c6da passes no CUDARTLIB: NCCL's src/Makefile (v2.30.7-1) defaults to cudart_static, found in
# cuda_cudart's static output (redist tarball; CUDA 13's wheel has it too). CUDA 12's cudart wheel has none: then,
# and only then, the set's expression links libcudart.so (pkgs/nccl/package.py, wheel_cudart_fallback).
@pytest.mark.parametrize("has_static", [True, False])
def test_nccl_links_static_cudart_unless_the_wheel_lacks_it(pkgs, tmp_path, has_static):
    cuda = pkgs.cudaPackages_13_0
    post_patch = cuda.nccl.drvAttrs["postPatch"]
    static = str(cuda.cuda_cudart.static)
    assert f'"{static}/lib/libcudart_static.a"' in post_patch
    assert "CUDARTLIB=" not in " ".join(cuda.nccl.drvAttrs["makeFlags"])  # no override: the expression decides
    fake = tmp_path / "fake-static"
    (fake / "lib").mkdir(parents=True)
    if has_static:
        (fake / "lib" / "libcudart_static.a").write_bytes(b"!<arch>\n")
    src = tmp_path / "src-tree"
    (src / "src").mkdir(parents=True)
    (src / "makefiles").mkdir()
    (src / "makefiles" / "common.mk").write_text("NVCUFLAGS := -ccbin $(CXX) -O3\n")
    makefile = "##### target files\nCUDARTLIB  ?= cudart_static\n"
    (src / "src" / "Makefile").write_text(makefile)
    done = subprocess.run(["bash", "-ec", post_patch.replace(static, str(fake))], cwd=src,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    expected = makefile if has_static else makefile.replace("?= cudart_static", "?= cudart")
    assert (src / "src" / "Makefile").read_text() == expected
    assert ("NVIDIA's wheel" in done.stdout) is (not has_static)


def test_nccl_refuses_pre_thor_jetson(manifests_dir, tmp_path):
    # nccl.nix@0145c6da: platformAssertions, "Pre-Thor Jetson devices (CUDA capabilities < 10.1) are not supported by NCCL"
    orin = _pkgs(tmp_path, "aarch64-linux", cudaCapabilities=["8.7"]).cudaPackages_12_6.nccl
    assert orin.meta.badPlatforms == ["aarch64-linux"] and orin.meta.available is False
    assert orin.meta.problems["unsupported"]["message"].endswith(
        "- Pre-Thor Jetson devices (CUDA capabilities < 10.1) are not supported by NCCL")
    thor = _pkgs(tmp_path, "aarch64-linux", cudaCapabilities=["11.0"]).cudaPackages_13_0.nccl
    assert thor.meta.available is True


def test_nccl_tests_gpu_test_and_mpi_assertion(pkgs):
    tests = pkgs.cudaPackages_13_0["nccl-tests"]
    run = tests.passthru["tests"]["cuda"]["all-reduce"]
    assert run.drvAttrs["requiredSystemFeatures"] == ["cuda"]
    assert tests.derivation.drv_path in {d.drv_path for d in run.derivation.deps}
    assert tests.meta.mainProgram == "all_reduce_perf"
    # nccl-tests.nix@0e4c4301: brokenAssertions "mpi is non-null when mpiSupport is true"
    broken = tests.override(mpiSupport=True)
    assert broken.meta.broken is True
    assert "mpi is non-null when mpiSupport is true" in broken.meta.problems["broken"]["message"]


def test_cutlass_needs_capabilities_from_7_0(manifests_dir, tmp_path):
    # cutlass.nix@371f570e: "all capabilities are >= 7.0 (<caps as JSON>)"
    old = _pkgs(tmp_path, cudaCapabilities=["6.1"]).cudaPackages_12_6.cutlass
    assert 'all capabilities are >= 7.0 (["6.1"])' in old.meta.problems["unsupported"]["message"]


def test_missing_inputs_are_named_in_nixpkgs_words(pkgs):
    # _cuda/lib/assertions.nix@114a56c2 `_mkMissingPackagesAssertions`: "<name> is available"
    shmem = pkgs.cudaPackages_13_0.libnvshmem
    message = shmem.meta.problems["broken"]["message"]
    for name in ("mpi", "ucx", "pmix"):
        assert f"- {name} is available" in message
    assert shmem.meta.license[0].short_name == "CUDA EULA"  # libnvshmem.nix: nvidiaCudaRedist


def test_unfree_from_source_members_need_allow_unfree(manifests_dir, tmp_path):
    gated = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path)}, system="x86_64-linux").cudaPackages_13_0
    assert gated["cuda-samples"].meta.available is False  # cuda-samples.nix: nvidiaCuda
    assert gated.gdrcopy.meta.available is True  # MIT


def test_the_sets_saxpy_uses_the_set(pkgs):
    cuda = pkgs.cudaPackages_12_8
    assert cuda.saxpy.drvAttrs["nativeBuildInputs"] == [cuda.cuda_nvcc.outPath]
    assert pkgs.saxpy is not cuda.saxpy  # the top-level saxpy stays


def test_substitute_in_place_fails_on_a_missing_pattern(tmp_path):
    target = tmp_path / "Makefile"
    target.write_text("NVCUFLAGS := -ccbin $(CXX) -O3\n")
    script = SUBSTITUTE_IN_PLACE + f"substituteInPlace {target} --replace-fail '-ccbin $(CXX)' ''\n"
    subprocess.run(["bash", "-e", "-c", script], check=True, env={"PATH": "/usr/bin:/bin"})
    assert target.read_text() == "NVCUFLAGS :=  -O3\n"
    again = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert again.returncode != 0 and "pattern '-ccbin $(CXX)' was not found" in again.stderr


@needs_sources
def test_a_wrong_source_hash_fails_with_both_hashes(manifests_dir, tmp_path):
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    pkgs = _pkgs(tmp_path, sourceMirrors=[str(SOURCES)])
    wrong = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
    src = pkgs.fetchFromGitHub(owner="NVIDIA", repo="gdrcopy", tag="v2.5.1", hash=wrong)
    with Store.open(tmp_path / "store") as store, pytest.raises(Exception) as info:
        realise(store, [src.derivation])
    text = str(info.value)
    assert wrong in text and NIXPKGS["gdrcopy"][5] in text


@pytest.mark.skipif(not os.environ.get("CUDAPKGS_NCCL_STORE"),
                    reason="building NCCL takes about an hour on two cores; set CUDAPKGS_NCCL_STORE to a store "
                           "that holds the closure bench/device/build_nccl.py builds")
def test_prebuilt_nccl_tests_closure(manifests_dir):
    """The store holds the outputs of *these* expressions (build_nccl.py's configuration), not an older build."""
    from cudapkgs.elf.read import read_elf
    from cudapkgs.store.store import Store

    store_dir = os.environ["CUDAPKGS_NCCL_STORE"]
    config = {"storeDir": store_dir, "fetchers": ["wheels"], "allowUnfree": True, "cudaSupport": True,
              "cudaCapabilities": ["9.0"], "cudaForwardCompat": False}  # bench/device/build_nccl.py packages()
    cuda = cudapkgs.import_pkgs(config=config).cudaPackages_13_0
    nccl, tests = cuda.nccl, cuda["nccl-tests"]
    with Store.open(store_dir) as store:
        missing = [p for p in (nccl.out, tests.out) if not store.is_valid(p)]
        assert not missing, (f"{store_dir} holds no build of the current expressions ({', '.join(missing)}): "
                             "run bench/device/build_nccl.py")
        closure = store.closure([tests.out])
    exe = read_elf(Path(tests.out, "bin", "all_reduce_perf"))
    assert "libnccl.so.2" in exe.needed and f"{nccl.out}/lib" in exe.runpath
    # nccl.nix@0145c6da passes no CUDARTLIB: cudart is linked statically (CUDA 13's wheel has libcudart_static.a).
    library = read_elf(next(Path(nccl.out, "lib").glob("libnccl.so.2.*")))
    assert not [n for n in library.needed if n.startswith("libcudart")]
    # nvcc's path is scrubbed (disallowedReferences): the run-time closure has no nvcc and no stub.
    assert nccl.out in closure and not [p for p in closure if "-cuda_nvcc-" in p or p.endswith("-stubs")]


def test_nccl_tests_gpu_test_is_skipped_without_a_gpu(pkgs):
    from cudapkgs import testers

    [result] = testers.run_tests(pkgs, ["cudaPackages_13_0.nccl-tests"], offered=frozenset())
    assert result.test.endswith("nccl-tests.tests.cuda.all-reduce")
    assert (result.result, result.detail) == ("skipped", "needs cuda")
