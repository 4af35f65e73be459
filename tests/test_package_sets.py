"""The set definitions against the reference facts (shared/reference/package-sets.json)."""

from __future__ import annotations

import pytest

from cudapkgs.package_sets import aliases, package_set_definitions, recurse_into, resolve_alias, set_name_for_cuda_version
from cudapkgs.errors import EvalError

from conftest import MANIFESTS, load_reference

REFERENCE = load_reference("package-sets.json")
CONDITION_NAMES = {
    "backendStdenv.hasJetsonCudaCapability": "jetson",
    "hasPreThorJetsonCudaCapability": "preThorJetson",
    "otherwise": None,
}


def test_same_sets_in_the_same_order():
    assert list(package_set_definitions()) == list(REFERENCE["packageSets"])


@pytest.mark.parametrize("name", list(REFERENCE["packageSets"]))
def test_manifest_versions_and_conditions_match_reference(name):
    expected = REFERENCE["packageSets"][name]
    definition = package_set_definitions()[name]
    assert definition.cuda_version.startswith(expected["cudaMajorMinorVersion"] + ".")
    assert set(definition.products) == set(expected["manifests"])
    for product, value in expected["manifests"].items():
        choices = definition.products[product]
        if isinstance(value, str):
            assert [(c.version, c.when) for c in choices] == [(value, None)]
        else:
            want = [(c["version"], CONDITION_NAMES[c["when"]]) for c in value["conditional"]]
            assert [(c.version, c.when) for c in choices] == want


def test_every_referenced_manifest_exists():
    for definition in package_set_definitions().values():
        for product, choices in definition.products.items():
            for choice in choices:
                assert (MANIFESTS / product / f"redistrib_{choice.version}.json").is_file(), (product, choice)


def test_aliases_match_reference():
    assert dict(aliases()) == REFERENCE["aliases"]
    assert recurse_into() == frozenset(REFERENCE["recurseIntoAttrs"])
    assert resolve_alias("cudaPackages") == "cudaPackages_12_9"
    assert resolve_alias("cudaPackages_13") == "cudaPackages_13_3"


def test_set_for_cuda_version():
    assert set_name_for_cuda_version("12.8") == "cudaPackages_12_8"
    assert set_name_for_cuda_version("13.4.2") == "cudaPackages_13_4"
    with pytest.raises(EvalError, match=r"no package set for CUDA 12\.7 \(available: 12\.6, 12\.8"):
        set_name_for_cuda_version("12.7")
