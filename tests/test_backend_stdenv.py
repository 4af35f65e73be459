"""backendStdenv through the package tree: capabilities, redist systems, assertion messages."""

from __future__ import annotations

import json

import pytest

import cudapkgs
from cudapkgs.errors import FailedAssertionsError
from cudapkgs.lib.versions import version_at_least

from conftest import load_reference

CAPABILITIES = {r["capability"]: r for r in load_reference("cuda-capabilities.json")}
SETS = list(load_reference("package-sets.json")["packageSets"])


def reference_defaults(cuda_mm: str) -> list[str]:
    """Nixpkgs' default-capability algorithm, computed here from the reference records."""
    out = []
    for cap, r in CAPABILITIES.items():  # the reference file is in Nix version order
        supported = version_at_least(cuda_mm, r["minCudaMajorMinorVersion"]) and (
            r["maxCudaMajorMinorVersion"] is None or version_at_least(r["maxCudaMajorMinorVersion"], cuda_mm)
        )
        recent = r["dontDefaultAfterCudaMajorMinorVersion"] is None or version_at_least(
            r["dontDefaultAfterCudaMajorMinorVersion"], cuda_mm
        )
        if supported and recent and not (r["isJetson"] or r["isArchitectureSpecific"] or r["isFamilySpecific"]):
            out.append(cap)
    return out


@pytest.fixture(autouse=True)
def _manifests(manifests_dir):
    return manifests_dir


def pkgs_with(caps=None, system="x86_64-linux", **extra):
    config = dict(extra)
    if caps is not None:
        config["cudaCapabilities"] = caps
    return cudapkgs.import_pkgs(config=config, system=system)


@pytest.mark.parametrize("set_name", SETS)
def test_default_capabilities_match_reference(set_name, manifests_dir):
    stdenv = getattr(pkgs_with(), set_name).backendStdenv
    mm = set_name.removeprefix("cudaPackages_").replace("_", ".")
    assert stdenv.defaultCudaCapabilities == reference_defaults(mm)
    assert stdenv.cudaCapabilities == reference_defaults(mm)
    assert stdenv.hostRedistSystem == "linux-x86_64"
    assert stdenv.hasJetsonCudaCapability is False


def test_the_spec_default_table():
    pkgs = pkgs_with()
    assert pkgs.cudaPackages_12_6.backendStdenv.defaultCudaCapabilities == ["7.5", "8.0", "8.6", "8.9", "9.0"]
    assert pkgs.cudaPackages_12_8.backendStdenv.defaultCudaCapabilities == [
        "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
    assert pkgs.cudaPackages_13_4.backendStdenv.defaultCudaCapabilities == [
        "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"]
    assert "9.0a" in pkgs.cudaPackages_12_6.backendStdenv.supportedCudaCapabilities


def test_requested_lists_keep_the_users_order():
    stdenv = pkgs_with(["9.0a", "8.7", "10.0f", "9.0"], system="aarch64-linux").cudaPackages_12_9
    with pytest.raises(FailedAssertionsError):
        stdenv.backendStdenv  # 8.7 (pre-Thor) mixed with others
    stdenv = pkgs_with(["10.1f", "10.1a", "10.1"], system="aarch64-linux").cudaPackages_12_9.backendStdenv
    assert stdenv.requestedJetsonCudaCapabilities == ["10.1f", "10.1a", "10.1"]
    assert stdenv.requestedArchitectureSpecificCudaCapabilities == ["10.1a"]
    assert stdenv.requestedFamilySpecificCudaCapabilities == ["10.1f"]
    assert stdenv.hasArchitectureSpecificCudaCapability and stdenv.hasFamilySpecificCudaCapability
    assert stdenv.hostRedistSystem == "linux-sbsa"


@pytest.mark.parametrize(
    ("caps", "system", "set_name", "expected"),
    [
        (["8.7"], "aarch64-linux", "cudaPackages_12_6", "linux-aarch64"),
        (["8.0", "8.9"], "aarch64-linux", "cudaPackages_12_6", "linux-sbsa"),
        (["11.0"], "aarch64-linux", "cudaPackages_13_0", "linux-sbsa"),
        # _cuda/lib/redist.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: Orin is SBSA from CUDA 13.0
        (["8.7"], "aarch64-linux", "cudaPackages_13_0", "linux-sbsa"),
        ([], "aarch64-linux", "cudaPackages_13_0", "linux-sbsa"),
        ([], "x86_64-linux", "cudaPackages_13_0", "linux-x86_64"),
    ],
)
def test_host_redist_system(caps, system, set_name, expected):
    assert getattr(pkgs_with(caps, system), set_name).backendStdenv.hostRedistSystem == expected


def failures(caps, set_name, system="x86_64-linux") -> list[str]:
    scope = getattr(pkgs_with(caps, system), set_name)
    with pytest.raises(FailedAssertionsError) as info:
        scope.backendStdenv
    header, *items = str(info.value).split("\n")
    assert header == f"{set_name}.backendStdenv has failed assertions:"
    assert all(item.startswith("- ") for item in items)
    return [item[2:] for item in items]


def test_unrecognized_capability():
    assert failures(["7.7"], "cudaPackages_12_8") == ['Requested unrecognized CUDA capabilities: ["7.7"]']


def test_too_old_and_too_new_are_listed_together():
    assert failures(["5.0", "8.9", "11.0"], "cudaPackages_12_9") == [
        'Requested CUDA capabilities which are too new for CUDA 12.9: ["11.0"]',
        'Requested Jetson CUDA capabilities (["11.0"]) require hostPlatform (x86_64-linux) to be aarch64-linux',
        'Requested post-Thor (10.1) Jetson CUDA capabilities (["11.0"]) require computed NVIDIA hostRedistSystem (linux-x86_64) to be linux-sbsa',
    ]
    assert failures(["5.0", "3.5"], "cudaPackages_13_0") == [
        'Requested CUDA capabilities which are too old for CUDA 13.0: ["5.0","3.5"]'
    ]


def test_max_bound_is_inclusive():
    assert pkgs_with(["5.0"]).cudaPackages_12_9.backendStdenv.cudaCapabilities == ["5.0"]
    assert failures(["10.1"], "cudaPackages_13_0", "aarch64-linux") == [
        'Requested CUDA capabilities which are too old for CUDA 13.0: ["10.1"]'
    ]


def test_pre_thor_rules():
    assert failures(["8.7", "9.0"], "cudaPackages_12_6", "aarch64-linux") == [
        'Requested pre-Thor (10.1) Jetson CUDA capabilities (["8.7"]) cannot be specified with other capabilities (["9.0"])'
    ]
    assert failures(["8.7"], "cudaPackages_12_6", "x86_64-linux") == [
        'Requested Jetson CUDA capabilities (["8.7"]) require hostPlatform (x86_64-linux) to be aarch64-linux',
        'Requested pre-Thor (10.1) Jetson CUDA capabilities (["8.7"]) require computed NVIDIA hostRedistSystem (linux-x86_64) to be linux-aarch64',
    ]


def test_post_thor_on_the_wrong_redist_system():
    messages = failures(["10.1", "8.7"], "cudaPackages_12_9", "aarch64-linux")
    assert messages == [
        'Requested pre-Thor (10.1) Jetson CUDA capabilities (["8.7"]) cannot be specified with other capabilities (["10.1"])',
        'Requested post-Thor (10.1) Jetson CUDA capabilities (["10.1"]) require computed NVIDIA hostRedistSystem (linux-aarch64) to be linux-sbsa',
    ]


def test_orin_and_thor_together_on_cuda_13():
    # cudaConfig.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: from CUDA 13.0 the SBSA threshold is 8.7,
    # so Orin (8.7) and Thor (11.0) are both linux-sbsa and may be requested together.
    scope = pkgs_with(["11.0", "8.7"], "aarch64-linux").cudaPackages_13_0
    assert scope.backendStdenv.hostRedistSystem == "linux-sbsa"


def test_assertions_are_lazy():
    pkgs = pkgs_with(["7.7"])
    scope = pkgs.cudaPackages_12_8  # building the tree and the set raises nothing
    assert scope.cudaMajorMinorVersion == "12.8"
    assert scope.cuda_nvcc.pname == "cuda_nvcc"
    with pytest.raises(FailedAssertionsError):
        scope.flags
    with pytest.raises(FailedAssertionsError):
        scope.cuda_nvcc.src
    with pytest.raises(FailedAssertionsError):  # still raises the second time: nothing half-cached
        scope.flags.gencode


def test_flags_follow_forward_compat_and_order():
    flags = pkgs_with(["8.9", "9.0"], cudaForwardCompat=False).cudaPackages_13_0.flags
    assert flags.gencode == ["-gencode=arch=compute_89,code=sm_89", "-gencode=arch=compute_90,code=sm_90"]
    flags = pkgs_with(["9.0", "8.9"]).cudaPackages_13_0.flags
    assert flags.gencode[-1] == "-gencode=arch=compute_89,code=compute_89"
    assert flags.cmakeCudaArchitecturesString == "90;89"
    assert flags.archNames == ["Ada", "Hopper"]
    assert flags.cudaComputeCapabilityToName("9.0a") == "Hopper"
    assert flags.isJetsonBuild is False
    assert json.dumps(flags.realArches) == '["sm_90", "sm_89"]'
