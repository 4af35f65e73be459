"""The capability and NVCC databases, compared with shared/reference."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from conftest import load_reference

from cudapkgs import db
from cudapkgs.errors import ConfigError, EvalError

REF_CAPS = load_reference("cuda-capabilities.json")
REF_NVCC = load_reference("nvcc-compatibilities.json")
FIELDS = [
    "archName",
    "isJetson",
    "isArchitectureSpecific",
    "isFamilySpecific",
    "minCudaMajorMinorVersion",
    "maxCudaMajorMinorVersion",
    "dontDefaultAfterCudaMajorMinorVersion",
]


def test_same_capabilities_in_reference_order():
    assert list(db.cuda_capability_to_info()) == [r["capability"] for r in REF_CAPS]
    assert db.all_sorted_cuda_capabilities(db.cuda_capability_to_info()) == [r["capability"] for r in REF_CAPS]


@pytest.mark.parametrize("ref", REF_CAPS, ids=lambda r: r["capability"])
@pytest.mark.parametrize("field", FIELDS)
def test_capability_record_field(ref, field):
    record = db.cuda_capability_to_info()[ref["capability"]]
    assert record[field] == ref[field]
    assert record["cudaCapability"] == ref["capability"]


def test_record_has_exactly_nixpkgs_attributes():
    for record in db.cuda_capability_to_info().values():
        assert set(record) == {"cudaCapability", *FIELDS}


def test_info_is_read_only():
    info = db.cuda_capability_to_info()
    assert isinstance(info, MappingProxyType)
    with pytest.raises(TypeError):
        info["8.9"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        info["8.9"]["isJetson"] = True  # type: ignore[index]


def test_nvcc_table_matches_reference():
    got = db.nvcc_compatibilities()
    assert list(got) == list(REF_NVCC)
    assert {k: {c: dict(r) for c, r in v.items()} for k, v in got.items()} == REF_NVCC


@pytest.mark.parametrize("cuda", list(REF_NVCC))
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_nvcc_host_compiler_range(cuda, compiler):
    ref = REF_NVCC[cuda][compiler]
    assert db.nvcc_host_compiler_range(cuda, compiler, db.nvcc_compatibilities()) == (
        int(ref["minMajorVersion"]),
        int(ref["maxMajorVersion"]),
    )


def test_nvcc_range_examples():
    nv = db.nvcc_compatibilities()
    assert db.nvcc_host_compiler_range("12.6", "gcc", nv) == (6, 13)
    assert db.nvcc_host_compiler_range("13.4", "clang", nv) == (7, 22)
    assert db.nvcc_host_compiler_range("12.6.3", "gcc", nv) == (6, 13)


def test_nvcc_unknown_version_and_compiler():
    nv = db.nvcc_compatibilities()
    with pytest.raises(EvalError, match=r"CUDA 12\.7 .*12\.6, 12\.8") as exc:
        db.nvcc_host_compiler_range("12.7", "gcc", nv)
    assert "\n" not in str(exc.value)
    with pytest.raises(EvalError, match=r'"icc".*clang, gcc'):
        db.nvcc_host_compiler_range("12.6", "icc", nv)


def test_nvcc_range_uses_given_db():
    fake = {"1.0": {"gcc": {"minMajorVersion": "3", "maxMajorVersion": "4"}}}
    assert db.nvcc_host_compiler_range("1.0", "gcc", fake) == (3, 4)
    with pytest.raises(EvalError, match="known CUDA versions: 1.0"):
        db.nvcc_host_compiler_range("12.6", "gcc", fake)


# §3.3 regression tables.
SUPPORTED_12_6 = "5.0 5.2 6.0 6.1 7.0 7.5 8.0 8.6 8.7 8.9 9.0 9.0a".split()
SUPPORTED = {
    "12.6": SUPPORTED_12_6,
    "12.8": SUPPORTED_12_6 + "10.0 10.0a 10.1 10.1a 12.0 12.0a".split(),
    "12.9": SUPPORTED_12_6
    + "10.0 10.0a 10.0f 10.1 10.1a 10.1f 10.3 10.3a 10.3f 12.0 12.0a 12.0f 12.1 12.1a 12.1f".split(),
    **{
        f"13.{n}": (
            "7.5 8.0 8.6 8.7 8.9 9.0 9.0a 10.0 10.0a 10.0f 10.3 10.3a 10.3f 11.0 11.0a 11.0f "
            "12.0 12.0a 12.0f 12.1 12.1a 12.1f"
        ).split()
        for n in range(5)
    },
}
DEFAULT = {
    "12.6": "7.5 8.0 8.6 8.9 9.0".split(),
    "12.8": "7.5 8.0 8.6 8.9 9.0 10.0 12.0".split(),
    "12.9": "7.5 8.0 8.6 8.9 9.0 10.0 10.3 12.0 12.1".split(),
    **{f"13.{n}": "7.5 8.0 8.6 8.9 9.0 10.0 10.3 12.0 12.1".split() for n in range(5)},
}


@pytest.mark.parametrize("cuda", list(SUPPORTED))
def test_supported_and_default_tables(cuda):
    info = db.cuda_capability_to_info()
    assert db.supported_capabilities(cuda, info) == SUPPORTED[cuda]
    assert db.default_capabilities(cuda, info) == DEFAULT[cuda]


def test_supported_and_default_from_reference_records():
    # A plain dict of the reference's records takes the generic path, not the cached one.
    info = {r["capability"]: r | {"cudaCapability": r["capability"]} for r in reversed(REF_CAPS)}
    for cuda in SUPPORTED:
        assert db.supported_capabilities(cuda, info) == SUPPORTED[cuda]
        assert db.default_capabilities(cuda, info) == DEFAULT[cuda]


def test_results_are_fresh_lists():
    info = db.cuda_capability_to_info()
    db.default_capabilities("12.6", info).append("bogus")
    db.all_sorted_cuda_capabilities(info).clear()
    assert db.default_capabilities("12.6", info) == DEFAULT["12.6"]
    assert len(db.all_sorted_cuda_capabilities(info)) == len(REF_CAPS)


def test_max_bound_is_inclusive():
    record = db.cuda_capability_to_info()["10.1f"]  # min = max = 12.9
    assert db.capability_is_supported("12.9", record)
    assert not db.capability_is_supported("12.8", record)
    assert not db.capability_is_supported("13.0", record)
    assert db.capability_is_supported("12.2", db.cuda_capability_to_info()["7.2"])


def test_is_default_rules():
    info = db.cuda_capability_to_info()
    assert db.capability_is_default("12.3", info["6.0"])  # dontDefaultAfter is inclusive too
    assert not db.capability_is_default("12.4", info["6.0"])
    assert not db.capability_is_default("12.6", info["8.7"])  # Jetson
    assert not db.capability_is_default("12.6", info["9.0a"])
    assert not db.capability_is_default("12.9", info["10.0f"])
    assert db.capability_is_default("12.9", info["10.0"])


def test_overridden_info_flows_through():
    info = dict(db.cuda_capability_to_info())
    info["8.8"] = {**info["8.7"], "cudaCapability": "8.8", "isJetson": False}
    assert "8.8" in db.supported_capabilities("12.6", info)
    assert db.default_capabilities("12.6", info) == ["7.5", "8.0", "8.6", "8.8", "8.9", "9.0"]
    assert db.all_sorted_cuda_capabilities(info).index("8.8") == db.all_sorted_cuda_capabilities(info).index("8.7") + 1


def test_arch_name_groups():
    groups = db.cuda_arch_name_to_capabilities(db.cuda_capability_to_info())
    expected: dict[str, list[str]] = {}
    for r in REF_CAPS:
        expected.setdefault(r["archName"], []).append(r["capability"])
    assert groups == expected
    assert groups["Hopper"] == ["9.0", "9.0a"]
    assert list(groups) == ["Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"]


@pytest.mark.parametrize("cap", [r["capability"] for r in REF_CAPS] + ["1.0", "99.9f"])
def test_pattern_accepts(cap):
    assert db.CAPABILITY_PATTERN.match(cap)
    db.check_capability_syntax(cap)


@pytest.mark.parametrize(
    ("bad", "hint"),
    [
        ("sm_89", '"8.9"'),
        ("89", '"8.9"'),
        ("compute_90a", '"9.0a"'),
        ("sm_100f", '"10.0f"'),
        (89, '"8.9"'),
        (8.9, '"8.9"'),
        ("8.9b", "optional"),
        ("8.9.1", "optional"),
        ("8.9\n", "optional"),
        ("", "optional"),
        (None, "string"),
    ],
)
def test_check_capability_syntax_rejects(bad, hint):
    if isinstance(bad, str):
        assert not db.CAPABILITY_PATTERN.match(bad)
    with pytest.raises(ConfigError) as exc:
        db.check_capability_syntax(bad)
    assert hint in str(exc.value)
    assert "\n" not in str(exc.value)
