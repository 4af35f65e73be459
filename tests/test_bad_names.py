"""Issue 21, "Bad input": an unknown component, product or fetcher name is one line naming the known
ones, and a manifest of a product the code does not know is refused when it loads, with its name."""

from __future__ import annotations

import json

import pytest

from cudapkgs import manifests as m
from cudapkgs.config import load_config
from cudapkgs.cuda.components import TableError, load_specs
from cudapkgs.errors import ConfigError, EvalError, ManifestError
from cudapkgs.package_sets import check_product, known_products

KNOWN = ", ".join(known_products())


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text, text
    return text


def _manifest(root, product, version, release_product):
    path = root / product / f"redistrib_{version}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"release_date": "2026-01-01", "release_label": version,
                                "release_product": release_product,
                                "x": {"name": "x", "version": "1", "linux-x86_64": {
                                    "relative_path": "x/x.tar.xz", "sha256": "0" * 64, "size": "1"}}}))
    return path


def test_a_manifest_of_an_unknown_product_is_refused_at_load_with_its_name(tmp_path):
    path = _manifest(tmp_path, "cudnn", "9.99.0", "cudnnx")
    with pytest.raises(ManifestError) as caught:
        m.load_manifest("cudnn", "9.99.0", directory=tmp_path)
    text = _one_line(caught.value)
    assert text.startswith(f"{path}: release_product: unknown product \"cudnnx\"")
    assert f"the known products are {KNOWN}" in text


def test_a_manifest_naming_another_known_product_is_refused(tmp_path):
    path = _manifest(tmp_path, "cudnn", "9.98.0", "cutensor")
    with pytest.raises(ManifestError, match="release_product 'cutensor' is not 'cudnn'") as caught:
        m.load_manifest("cudnn", "9.98.0", directory=tmp_path)
    assert str(path) in _one_line(caught.value)


def test_loading_or_updating_an_unknown_product_names_the_known_ones(tmp_path):
    with pytest.raises(ManifestError) as caught:
        m.load_manifest("cuqantum", "26.09.0", directory=tmp_path)
    text = _one_line(caught.value)
    assert 'unknown product "cuqantum" (did you mean "cuquantum"?)' in text and KNOWN in text
    with pytest.raises(ManifestError, match=r'cudapkgs manifests update: unknown product "nvjpeg"'):
        m.update_manifest("nvjpeg", "1.0", source=str(tmp_path))


def test_a_set_naming_an_unknown_product(tmp_path):
    with pytest.raises(EvalError) as caught:
        check_product("tensorrtt", "data/package_sets.toml [sets.cudaPackages_13_0]")
    text = _one_line(caught.value)
    assert text.startswith('data/package_sets.toml [sets.cudaPackages_13_0]: unknown product "tensorrtt"')
    assert KNOWN in text


def test_the_component_table_refuses_unknown_products_and_components():
    with pytest.raises(TableError) as caught:
        load_specs({"cudaa": {"x": {}}})
    assert 'unknown product "cudaa" (did you mean "cuda"' in _one_line(caught.value)
    with pytest.raises(TableError) as caught:
        load_specs({"cuda": {"x": {"depends": [{"component": "cuda_cudartt", "kind": "build"}]}}},
                   members=frozenset({"nccl"}))
    text = _one_line(caught.value)
    assert '[cuda.x]: unknown component "cuda_cudartt"' in text and "the set members are nccl, x" in text


def test_an_unknown_fetcher_names_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        load_config(sets=['fetchers=["wheel"]'])
    text = _one_line(caught.value)
    assert '"wheel" is not a fetcher; use "redist", "mirror:<dir or URL prefix>" or "wheels"' in text
