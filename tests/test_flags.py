"""Flag generation (spec §5) and CUDA system features (spec §11)."""

from __future__ import annotations

import pytest
from conftest import load_reference

from cudapkgs import flags
from cudapkgs.db import cuda_capability_to_info
from cudapkgs.errors import EvalError

INFO = cuda_capability_to_info()
KEYS = {
    "cudaCapabilities",
    "cudaForwardCompat",
    "realArches",
    "virtualArches",
    "gencode",
    "arches",
    "archNames",
    "cmakeCudaArchitecturesString",
    "gencodeString",
}


@pytest.mark.parametrize(
    ("cap", "dropped", "real", "virtual"),
    [
        ("8.9", "89", "sm_89", "compute_89"),
        ("9.0a", "90a", "sm_90a", "compute_90a"),
        ("10.0f", "100f", "sm_100f", "compute_100f"),
        ("10.0a", "100a", "sm_100a", "compute_100a"),
    ],
)
def test_architecture_names(cap, dropped, real, virtual):
    assert flags.drop_dots(cap) == dropped
    assert flags.mk_real_architecture(cap) == real
    assert flags.mk_virtual_architecture(cap) == virtual


def test_small_helpers():
    assert flags.dots_to_underscores("12.6.3") == "12_6_3"
    assert flags.mk_gencode_flag("sm", "8.9") == "-gencode=arch=compute_89,code=sm_89"
    assert flags.mk_gencode_flag("compute", "9.0a") == "-gencode=arch=compute_90a,code=compute_90a"
    assert flags.mk_cmake_cuda_architectures_string(["8.9", "10.0a"]) == "89;100a"
    assert flags.mk_cmake_cuda_architectures_string([]) == ""
    assert flags.mk_cuda_system_feature("8.9") == "cuda-sm-89"
    assert flags.mk_cuda_system_feature("10.0a") == "cuda-sm-100a"


G89 = "-gencode=arch=compute_89,code=sm_89"
G90 = "-gencode=arch=compute_90,code=sm_90"
G90C = "-gencode=arch=compute_90,code=compute_90"


def test_format_ada_hopper_forward_compat():
    f = flags.format_capabilities(INFO, ["8.9", "9.0"], True)
    assert set(f) == KEYS
    assert f["gencode"] == [G89, G90, G90C]
    assert f["gencodeString"] == f"{G89} {G90} {G90C}"
    assert f["realArches"] == ["sm_89", "sm_90"]
    assert f["virtualArches"] == ["compute_89", "compute_90"]
    assert f["arches"] == ["sm_89", "sm_90", "compute_90"]
    assert f["archNames"] == ["Ada", "Hopper"]
    assert f["cmakeCudaArchitecturesString"] == "89;90"
    assert f["cudaCapabilities"] == ["8.9", "9.0"] and f["cudaForwardCompat"] is True


def test_format_without_forward_compat():
    f = flags.format_capabilities(INFO, ["8.9", "9.0"], False)
    assert f["gencode"] == [G89, G90]
    assert f["gencodeString"] == f"{G89} {G90}"
    assert f["arches"] == ["sm_89", "sm_90"]
    assert f["cmakeCudaArchitecturesString"] == "89;90"


def test_format_in_tree_flags_test():
    f = flags.format_capabilities(INFO, ["7.5", "8.6"], True)
    assert f["archNames"] == ["Ampere", "Turing"]
    assert f["arches"] == ["sm_75", "sm_86", "compute_86"]
    assert f["gencode"] == [
        "-gencode=arch=compute_75,code=sm_75",
        "-gencode=arch=compute_86,code=sm_86",
        "-gencode=arch=compute_86,code=compute_86",
    ]
    assert f["cmakeCudaArchitecturesString"] == "75;86"


def test_format_architecture_specific_forward_compat():
    f = flags.format_capabilities(INFO, ["9.0a"], True)
    assert f["gencodeString"] == "-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90a,code=compute_90a"


def test_forward_compat_uses_last_as_given():
    f = flags.format_capabilities(INFO, ["9.0", "8.9"], True)
    assert f["gencode"][-1] == "-gencode=arch=compute_89,code=compute_89"
    assert f["arches"] == ["sm_90", "sm_89", "compute_89"]
    assert f["cmakeCudaArchitecturesString"] == "90;89"  # order kept, not sorted


def test_arch_names_unique_and_natural_sorted():
    f = flags.format_capabilities(INFO, ["12.0", "9.0", "8.0", "8.6", "10.0a"], False)
    assert f["archNames"] == ["Ampere", "Blackwell", "Hopper"]


def test_empty_capabilities():
    f = flags.format_capabilities(INFO, [], False)
    assert f["gencode"] == [] and f["arches"] == [] and f["gencodeString"] == ""
    with pytest.raises(EvalError, match="empty"):
        flags.format_capabilities(INFO, [], True)


def test_unknown_capability_in_format():
    with pytest.raises(EvalError, match=r'8\.8.*did you mean'):
        flags.format_capabilities(INFO, ["8.8"], False)


def test_format_does_not_alias_input():
    caps = ["8.9"]
    f = flags.format_capabilities(INFO, caps, False)
    f["cudaCapabilities"].append("9.0")
    assert caps == ["8.9"]


@pytest.mark.parametrize("ref", load_reference("cuda-capabilities.json"), ids=lambda r: r["capability"])
def test_format_single_reference_capability(ref):
    cap = ref["capability"]
    d = cap.replace(".", "")
    f = flags.format_capabilities(INFO, [cap], True)
    assert f["archNames"] == [ref["archName"]]
    assert f["arches"] == [f"sm_{d}", f"compute_{d}"]


def features(*gpus):
    return [x.removeprefix("cuda-sm-") for x in flags.get_cuda_system_features(list(gpus), INFO)]


def test_system_features_rtx_4090():
    assert features("8.9") == "35 37 50 52 60 61 70 72 75 80 86 87 89".split()


def test_system_features_suffixes():
    b100 = features("10.0")
    assert "100a" in b100 and "100f" in b100 and "90a" not in b100
    b103 = features("10.3")
    assert "100f" in b103 and "103f" in b103 and "100a" not in b103 and "103a" in b103
    # family-specific needs the same major
    assert not any(x.endswith("f") and not x.startswith("12") for x in features("12.1"))
    assert "120f" in features("12.1") and "121f" in features("12.1")
    assert "101f" not in features("10.0")


def test_system_features_union_of_gpus():
    both = features("9.0", "10.0")
    assert "90a" in both and "90a" not in features("10.0")
    assert len(both) == len(set(both))
    assert both == features("9.0") + [x for x in features("10.0") if x not in features("9.0")]


def test_system_features_errors():
    with pytest.raises(EvalError, match=r"^_cuda\.lib\.getCudaSystemFeatures: unknown CUDA capability 8\.8"):
        flags.get_cuda_system_features(["8.8"], INFO)
    with pytest.raises(
        EvalError, match=r"^_cuda\.lib\.getCudaSystemFeatures: 9\.0a is a feature set rather than a GPU; pass 9\.0$"
    ):
        flags.get_cuda_system_features(["9.0a"], INFO)
    assert flags.get_cuda_system_features([], INFO) == []
