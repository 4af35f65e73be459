"""cudatoolkit (a symlinkJoin of the toolkit's components) and tests.redists-installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redist_fixtures as rf
from elf_builders import GCC

import cudapkgs
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> rf.Release:
    return rf.make_release(tmp_path_factory.mktemp("release"))


@pytest.fixture
def cuda(tmp_path, release):
    for server in rf.serve():
        server.files.update(release.archives)
        config = {
            "allowUnfree": True,
            "manifestsDir": os.fspath(release.write_manifests(tmp_path / "manifests")),
            "storeDir": os.fspath(tmp_path / "store"),
            "fetchers": [f"mirror:{server.url}"],
        }
        yield cudapkgs.import_pkgs(config=config, system="x86_64-linux")[rf.SET]


def test_cudatoolkit_joins_the_available_components(cuda, tmp_path):
    toolkit = cuda.cudatoolkit
    present = set(toolkit.passthru["components"])
    assert {"cuda_cudart", "libcublas"} <= present
    with Store.open(tmp_path / "store") as store:
        realise(store, [toolkit.derivation])
        assert store.verify() == []
        refs = set(store.references(toolkit.out))
    out = Path(toolkit.out)
    lib = out / "lib" / "libcudart.so.13"
    assert lib.is_symlink() and os.readlink(lib).startswith(cuda.cuda_cudart.lib)
    assert (out / "include").is_dir() and not (out / "nix-support").exists()
    assert cuda.cuda_cudart.lib in refs and cuda.libcublas.lib in refs  # the join keeps its parts alive


def test_redists_installed_links_every_output_of_what_is_available(cuda, tmp_path):
    installed = cuda.tests["redists-installed"]
    with Store.open(tmp_path / "store") as store:
        realise(store, [installed.derivation])
    out = Path(installed.out)
    for pname in ("cuda_cudart", "libcublas"):
        package = cuda[pname]
        for output in package.outputs:
            assert os.readlink(out / f"{pname}-{output}") == package[output]
    assert "cuda_compat" in installed.meta["leftOut"]
    assert "problems" not in installed.meta


def test_no_redists_available_is_a_problem(tmp_path, release):
    config = {"manifestsDir": os.fspath(release.write_manifests(tmp_path / "manifests")),
              "storeDir": os.fspath(tmp_path / "store")}
    gated = cudapkgs.import_pkgs(config=config, system="x86_64-linux")[rf.SET]  # nothing unfree allowed
    meta = gated.tests["redists-installed"].meta
    assert meta["available"] is False
    assert "No redists are available for the current NVIDIA system identifier (linux-x86_64)" in \
        meta["problems"]["noRedistsAvailable"]["message"]
